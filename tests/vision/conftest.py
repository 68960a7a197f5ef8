"""Tiny random vision-language models (mlx-vlm's classes, random weights) and
images made with Pillow: real MLX, a fraction of a second per turn.

The fixtures every family's tests share are here: the model folders (each
family's own helpers are in its ``*_models.py``), the tiny Qwen2-VL loaded as
the API names it (``tiny_vl``), and the images. The scenarios they share are
``served.py`` (the API), ``sessions.py`` (a conversation) and ``turns.py``
(the engine's six turns)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlxchat.chat import ImageRef
from mlxchat.models import load_folder
from mlxchat.models.testing.gemma3 import write_tiny_gemma3_vl
from mlxchat.models.testing.smolvlm import write_tiny_smolvlm
from mlxchat.models.testing.vision import write_tiny_qwen_vl
from mlxchat.models.vision.images import file_digest

from .gemma3_models import WINDOW, gemma3_template
from .gemma3_models import published_processor as gemma3_processor
from .mistral3_models import write_mistral3
from .smolvlm_models import smolvlm_template

DATA = Path(__file__).parent / "data"


FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


def qwen_vl_template() -> str:
    """Qwen2-VL's published chat template (data/SOURCES.md); Qwen2.5-VL's is the same."""
    return json.loads((DATA / "qwen2-vl-7b-instruct.chat_template.json").read_text())[
        "chat_template"]


def family_template(family: str) -> str:
    """The family's published chat template (data/SOURCES.md)."""
    if family == "qwen3_vl":
        return (DATA / "qwen3-vl-8b-instruct.chat_template.jinja").read_text()
    return qwen_vl_template()


def family_processor(family: str) -> dict | None:
    """The family's published image processor settings (None: Qwen2-VL's, built in)."""
    name = {"qwen2_5_vl": "qwen2.5-vl-7b-instruct", "qwen3_vl": "qwen3-vl-8b-instruct"}.get(family)
    return None if name is None else json.loads(
        (DATA / f"{name}.preprocessor_config.json").read_text())


def write_family(folder: Path, family: str, **sizes) -> Path:
    return write_tiny_qwen_vl(folder, chat_template=family_template(family), family=family,
                              processor=family_processor(family), **sizes)


def mlx_vlm_image_tokens(folder: Path, path: str) -> int:
    """The placeholder tokens mlx-vlm's own processor gives the image at ``path``
    under the folder's settings (its grid, merged)."""
    from PIL import Image

    config = json.loads((folder / "config.json").read_text())
    if config["model_type"] == "qwen3_vl":
        from mlx_vlm.models.qwen3_vl.processing_qwen3_vl import (
            Qwen3VLImageProcessor,
            _qwen_vl_image_kwargs,
        )

        processor = Qwen3VLImageProcessor(**_qwen_vl_image_kwargs(str(folder)))
    else:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        settings = json.loads((folder / "preprocessor_config.json").read_text())
        settings.pop("image_processor_type", None)
        settings.pop("processor_class", None)
        processor = Qwen2VLImageProcessorPil(**settings)
    with Image.open(path) as img:
        grid = processor(images=[img.convert("RGB")], return_tensors="np")["image_grid_thw"][0]
    return int(grid[0] * grid[1] * grid[2]) // processor.merge_size ** 2


@pytest.fixture(scope="session", params=FAMILIES)
def vl_folder(request, tmp_path_factory) -> Path:
    return write_family(tmp_path_factory.mktemp(request.param), request.param)


@pytest.fixture(scope="session")
def qwen_folder(tmp_path_factory) -> Path:
    return write_tiny_qwen_vl(tmp_path_factory.mktemp("qwen2_vl"),
                              chat_template=qwen_vl_template())


@pytest.fixture(scope="session")
def gemma3_folder(tmp_path_factory) -> Path:
    return write_tiny_gemma3_vl(tmp_path_factory.mktemp("gemma3"),
                                chat_template=gemma3_template(), window=WINDOW,
                                processor_config=gemma3_processor())


@pytest.fixture(scope="session")
def smolvlm_folder(tmp_path_factory) -> Path:
    return write_tiny_smolvlm(tmp_path_factory.mktemp("smolvlm"), chat_template=smolvlm_template())


@pytest.fixture(scope="session")
def mistral3_folder(tmp_path_factory) -> Path:
    return write_mistral3(tmp_path_factory.mktemp("mistral3"))


def load(folder: Path):
    """A fresh load: nothing of an earlier model object (features, positions) kept."""
    return load_folder(folder, available=None)


def load_for_api(folder: Path):
    """A fresh load named as the API's requests name it (``tiny``)."""
    return load_folder(folder, name="tiny", spec="tiny", available=None)


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory):
    """A tiny Qwen2-VL for the app and the API, one a test module."""
    return load_for_api(write_tiny_qwen_vl(tmp_path_factory.mktemp("tiny-vl"),
                                           chat_template=qwen_vl_template()))


def make_image(path: Path, size: tuple[int, int], seed: int, fmt: str = "PNG") -> ImageRef:
    from PIL import Image

    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(
        path, format=fmt)
    return ImageRef(digest=file_digest(path), path=str(path), name=path.name,
                    width=size[0], height=size[1])


@pytest.fixture
def images(tmp_path) -> list[ImageRef]:
    return [make_image(tmp_path / "a.png", (100, 70), 1),
            make_image(tmp_path / "b.png", (60, 90), 2)]


@pytest.fixture
def shot(tmp_path) -> bytes:
    """A PNG's bytes, as a client sends them."""
    return Path(make_image(tmp_path / "shot.png", (100, 70), 8).path).read_bytes()


def ramp_image(folder: Path) -> ImageRef:
    """A 60x40 picture of colour ramps (the same pixels every run, for snapshots)."""
    from PIL import Image

    rows = np.linspace(0, 255, 40, dtype=np.uint8)
    pixels = np.stack([np.tile(rows[:, None], (1, 60)), np.tile(rows[::-1, None], (1, 60)),
                       np.full((40, 60), 128, np.uint8)], axis=-1)
    Image.fromarray(pixels).save(folder / "ramp.png")
    return ImageRef("ab" * 32, str(folder / "ramp.png"), name="ramp.png", width=60, height=40)
