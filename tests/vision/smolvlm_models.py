"""The tiny SmolVLM of the vision tests: mlx-vlm's classes, random weights,
SmolVLM-Instruct's published chat template (data/SOURCES.md), and mlx-vlm's
own processor to check the prompt against."""

from __future__ import annotations

from pathlib import Path

TILE_TOKENS = 16
"""The tiny model's tokens per tile: (32 / 4)^2 patches, pixel-shuffled by 2x2."""
DATA = Path(__file__).parent / "data"


def smolvlm_template() -> str:
    """SmolVLM-Instruct's published chat template (data/SOURCES.md): content
    read as parts only."""
    return (DATA / "smolvlm-instruct.chat_template.jinja").read_text()


def mlx_vlm_inputs(folder: Path, text: str, images: list) -> dict:
    """What mlx-vlm's SmolVLM processor makes of ``text`` (one ``<image>`` per
    image) and the images: ids, pixel values of every tile."""
    import json

    from mlx_vlm.models.smolvlm.processing_smolvlm import SmolVLMProcessor
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.smolvlm.image_processing_pil_smolvlm import (
        SmolVLMImageProcessorPil,
    )

    tok = AutoTokenizer.from_pretrained(folder)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    ip = SmolVLMImageProcessorPil(**{k: v for k, v in pre.items() if v is not None and k not in (
        "image_processor_type", "processor_class")})
    proc = SmolVLMProcessor(image_processor=ip, tokenizer=tok, image_seq_len=TILE_TOKENS)
    out = proc(images=[[Image.open(r.path).convert("RGB")] for r in images], text=text,
               return_tensors="np", add_special_tokens=False)
    return {"ids": out["input_ids"].tolist()[0], "pixels": out["pixel_values"]}
