"""The tiny Mistral 3 of the vision tests: mlx-vlm's classes, random weights,
Mistral Small 3.1's published chat template and Mistral Small 3's processor
settings (data/SOURCES.md), and mlx-vlm's own processor to check the prompt
against."""

from __future__ import annotations

import json
from pathlib import Path

from mlxchat.models.testing.mistral3 import write_tiny_mistral3

DATA = Path(__file__).parent / "data"
TEMPLATE = "mistral-small-3.1-24b-instruct-2503.chat_template.jinja"
PROCESSOR = "mistral-small-3.preprocessor_config.json"


def mistral3_template() -> str:
    """Mistral Small 3.1's published chat template (data/SOURCES.md)."""
    return (DATA / TEMPLATE).read_text()


def published_processor() -> dict:
    return json.loads((DATA / PROCESSOR).read_text())


def write_mistral3(folder: Path, **sizes) -> Path:
    return write_tiny_mistral3(folder, chat_template=mistral3_template(),
                               processor_config=published_processor(), **sizes)


def mlx_vlm_processor(folder: Path):
    """mlx-vlm's own Mistral 3 processor for the folder, as its loader builds it."""
    from mlx_vlm.models.mistral3.processing_mistral3 import Mistral3Processor

    return Mistral3Processor.from_pretrained(str(folder))


def mlx_vlm_inputs(folder: Path, text: str, images: list) -> dict:
    """What mlx-vlm's processor makes of ``text`` (one ``[IMG]`` per image) and
    the images: ids, pixel values, image sizes."""
    from PIL import Image

    out = mlx_vlm_processor(folder)(images=[Image.open(r.path).convert("RGB") for r in images],
                                    text=text, add_special_tokens=False)
    return {"ids": [int(t) for t in out["input_ids"][0].tolist()],
            "pixels": out["pixel_values"], "sizes": out["image_sizes"]}
