"""The small random models bench/vision.py times, one per vision family:
how to write the folder, its published chat template, and mlx-vlm's own
processor for it (bench/vision_mlx_vlm.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "vision" / "data"


@dataclass(frozen=True)
class BenchFamily:
    name: str
    """The suffix of its figures (``vision_followup_ratio_NAME``)."""
    describe: str
    template: Callable[[], str]
    write: Callable[[Path, str], Path]
    processor: Callable[[Path, str], Any]
    """mlx-vlm's processor for the folder, as ``load_processor`` builds it."""


def _qwen_template() -> str:
    return json.loads((DATA / "qwen2-vl-7b-instruct.chat_template.json").read_text())[
        "chat_template"]


def _write_qwen(folder: Path, template: str) -> Path:
    from mlxchat.models.tiny_vision import write_tiny_qwen_vl

    return write_tiny_qwen_vl(folder, chat_template=template, hidden_size=256, num_layers=4,
                              vision_depth=2, vision_width=64, max_pixels=448 * 448)


def _qwen_processor(folder: Path, template: str) -> Any:
    from mlx_vlm.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    settings = json.loads((folder / "preprocessor_config.json").read_text())
    settings.pop("image_processor_type", None)
    return Qwen2VLProcessor(image_processor=Qwen2VLImageProcessorPil(**settings),
                            tokenizer=tokenizer, chat_template=template)


def _write_gemma3(folder: Path, template: str) -> Path:
    from mlxchat.models.tiny_vision_gemma3 import write_tiny_gemma3_vl

    published = json.loads((DATA / "gemma-3-4b-it.preprocessor_config.json").read_text())
    return write_tiny_gemma3_vl(folder, chat_template=template, hidden_size=256,
                                num_layers=6, window=128, image_size=128, patch_size=4,
                                tokens_per_image=256, processor_config=published)


def _gemma3_processor(folder: Path, template: str) -> Any:
    from mlx_vlm.models.gemma3.processing_gemma3 import Gemma3Processor
    from transformers import PreTrainedTokenizerFast
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    # The published tokenizer names its image tokens; the tiny one's are set here.
    tokenizer.image_token, tokenizer.boi_token, tokenizer.eoi_token = (
        "<image_soft_token>", "<start_of_image>", "<end_of_image>")
    tokenizer.image_token_id = tokenizer.convert_tokens_to_ids(tokenizer.image_token)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    seq = json.loads((folder / "processor_config.json").read_text())["image_seq_length"]
    images = Gemma3ImageProcessorPil(**{k: v for k, v in pre.items() if v is not None and k not in (
        "image_processor_type", "processor_class", "image_seq_length")})
    return Gemma3Processor(image_processor=images, tokenizer=tokenizer, chat_template=template,
                           image_seq_length=seq)


FAMILIES = {
    "qwen2_vl": BenchFamily("qwen2_vl", "small random Qwen2-VL (hidden 256, 4 layers; "
                            "vision depth 2)", _qwen_template, _write_qwen, _qwen_processor),
    "gemma3": BenchFamily("gemma3", "small random Gemma 3 (hidden 256, 6 layers: 5 with a "
                          "128-token window, 1 global; SigLIP depth 1)",
                          lambda: (DATA / "gemma-3-4b-it.chat_template.jinja").read_text(),
                          _write_gemma3, _gemma3_processor),
}
