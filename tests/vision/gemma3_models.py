"""The tiny Gemma 3 of the vision tests: mlx-vlm's classes, random weights,
Google's published chat template and processor settings (data/SOURCES.md),
and mlx-vlm's own processor to check the prompt against."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).parent / "data"
WINDOW = 48
"""The tiny model's sliding window (1,024 in the published ones)."""


def gemma3_template() -> str:
    """Gemma 3's published chat template (data/SOURCES.md)."""
    return (DATA / "gemma-3-4b-it.chat_template.jinja").read_text()


def published_processor() -> dict:
    return json.loads((DATA / "gemma-3-4b-it.preprocessor_config.json").read_text())


def mlx_vlm_prompt(folder: Path, text: str, images: list) -> list[int]:
    """The ids mlx-vlm's Gemma 3 processor makes of ``text`` (with one
    ``<start_of_image>`` per image) and the images."""
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
    from mlx_vlm.models.gemma3.processing_gemma3 import Gemma3Processor

    tok = AutoTokenizer.from_pretrained(folder)
    tok.image_token, tok.boi_token, tok.eoi_token = (
        "<image_soft_token>", "<start_of_image>", "<end_of_image>")
    tok.image_token_id = tok.convert_tokens_to_ids(tok.image_token)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    seq = json.loads((folder / "processor_config.json").read_text())["image_seq_length"]
    ip = Gemma3ImageProcessorPil(**{k: v for k, v in pre.items() if v is not None and k not in (
        "image_processor_type", "processor_class", "image_seq_length")})
    proc = Gemma3Processor(image_processor=ip, tokenizer=tok, image_seq_length=seq)
    out = proc(images=[Image.open(r.path) for r in images], text=text, add_special_tokens=False)
    return out["input_ids"].tolist()[0]
