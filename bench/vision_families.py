"""The small random models bench/vision.py times, one per vision family:
how to write the folder (the family's published template and processor
settings, tests/vision/data), and mlx-vlm's own processor for it
(bench/vision_mlx_vlm.py)."""

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
    side: int = 448
    """The side of the bench's square pictures."""


def _write_qwen(family: str) -> Callable[[Path, str], Path]:
    def write(folder: Path, template: str) -> Path:
        from tests.vision.conftest import write_family

        side = _SIDES[family]
        return write_family(folder, family, hidden_size=256, num_layers=4, vision_depth=2,
                            vision_width=64, max_pixels=side * side)
    return write


def _qwen_image_processor(folder: Path, family: str) -> Any:
    """The image processor mlx-vlm's ``load_processor`` builds for the family."""
    if family == "qwen3_vl":
        from mlx_vlm.models.qwen3_vl.processing_qwen3_vl import (
            Qwen3VLImageProcessor,
            _qwen_vl_image_kwargs,
        )

        return Qwen3VLImageProcessor(**_qwen_vl_image_kwargs(str(folder)))
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    settings = json.loads((folder / "preprocessor_config.json").read_text())
    settings.pop("image_processor_type", None)
    settings.pop("processor_class", None)
    return Qwen2VLImageProcessorPil(**settings)


def _qwen_processor(family: str) -> Callable[[Path, str], Any]:
    def processor(folder: Path, template: str) -> Any:
        from mlx_vlm.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
        from mlx_vlm.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
        from mlx_vlm.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
        from transformers import PreTrainedTokenizerFast

        kind = {"qwen2_vl": Qwen2VLProcessor, "qwen2_5_vl": Qwen2_5_VLProcessor,
                "qwen3_vl": Qwen3VLProcessor}[family]
        return kind(image_processor=_qwen_image_processor(folder, family),
                    tokenizer=PreTrainedTokenizerFast.from_pretrained(str(folder)),
                    chat_template=template)
    return processor


def _qwen(family: str, title: str) -> BenchFamily:
    from tests.vision.conftest import family_template

    return BenchFamily(family, f"small random {title} (hidden 256, 4 layers; vision depth 2)",
                       lambda: family_template(family), _write_qwen(family),
                       _qwen_processor(family), _SIDES[family])


_SIDES = {"qwen2_vl": 448, "qwen2_5_vl": 448, "qwen3_vl": 512}
"""Each family's picture side: 16 x 16 merged patches (patch 14, or 16 on Qwen3-VL)."""


def _write_gemma3(folder: Path, template: str) -> Path:
    from mlxchat.models.testing.gemma3 import write_tiny_gemma3_vl

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


def _write_smolvlm(folder: Path, template: str) -> Path:
    from mlxchat.models.testing.smolvlm import write_tiny_smolvlm

    return write_tiny_smolvlm(folder, chat_template=template, hidden_size=256, num_layers=4,
                              tile=64, patch_size=4, longest_edge=128)


def _smolvlm_processor(folder: Path, template: str) -> Any:
    from mlx_vlm.models.smolvlm.processing_smolvlm import SmolVLMProcessor
    from transformers import PreTrainedTokenizerFast
    from transformers.models.smolvlm.image_processing_pil_smolvlm import (
        SmolVLMImageProcessorPil,
    )

    pre = json.loads((folder / "preprocessor_config.json").read_text())
    images = SmolVLMImageProcessorPil(**{
        k: v for k, v in pre.items()
        if v is not None and k not in ("image_processor_type", "processor_class")})
    return SmolVLMProcessor(image_processor=images,
                            tokenizer=PreTrainedTokenizerFast.from_pretrained(str(folder)),
                            image_seq_len=_SMOLVLM_TILE_TOKENS, chat_template=template)


_SMOLVLM_TILE_TOKENS = 64
"""(64 / 4)^2 patches a tile, pixel-shuffled by 2x2: 4 tiles and the global view an image."""


def _write_mistral3(folder: Path, template: str) -> Path:
    from mlxchat.models.testing.mistral3 import write_tiny_mistral3

    published = json.loads((DATA / "mistral-small-3.preprocessor_config.json").read_text())
    return write_tiny_mistral3(folder, chat_template=template, hidden_size=256, num_layers=4,
                               image_size=128, patch_size=4, vision_layers=2,
                               processor_config=published)


def _mistral3_processor(folder: Path, template: str) -> Any:
    from mlx_vlm.models.mistral3.processing_mistral3 import Mistral3Processor

    return Mistral3Processor.from_pretrained(str(folder))


FAMILIES = {
    "qwen2_vl": _qwen("qwen2_vl", "Qwen2-VL"),
    "qwen2_5_vl": _qwen("qwen2_5_vl", "Qwen2.5-VL"),
    "qwen3_vl": _qwen("qwen3_vl", "Qwen3-VL"),
    "gemma3": BenchFamily("gemma3", "small random Gemma 3 (hidden 256, 6 layers: 5 with a "
                          "128-token window, 1 global; SigLIP depth 1)",
                          lambda: (DATA / "gemma-3-4b-it.chat_template.jinja").read_text(),
                          _write_gemma3, _gemma3_processor),
    "smolvlm": BenchFamily("smolvlm", "small random SmolVLM (hidden 256, 4 layers; SigLIP "
                           "depth 1; 2 x 2 tiles of 64 tokens and the global view)",
                           lambda: (DATA / "smolvlm-instruct.chat_template.jinja").read_text(),
                           _write_smolvlm, _smolvlm_processor),
    "mistral3": BenchFamily("mistral3", "small random Mistral 3 (hidden 256, 4 layers; "
                            "Pixtral depth 2; 16 rows of 16 tokens, a break after each)",
                            lambda: (DATA / "mistral-small-3.1-24b-instruct-2503."
                                     "chat_template.jinja").read_text(),
                            _write_mistral3, _mistral3_processor, side=128),
}
