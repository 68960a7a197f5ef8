"""Tiny random vision-language models (mlx-vlm's classes, random weights) and
images made with Pillow: real MLX, a fraction of a second per turn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlxchat.chat import ImageRef
from mlxchat.models import load_folder
from mlxchat.models.tiny_vision import write_tiny_qwen_vl
from mlxchat.models.vision_images import file_digest

DATA = Path(__file__).parent / "data"


def qwen_vl_template() -> str:
    """Qwen2-VL's published chat template (data/SOURCES.md)."""
    return json.loads((DATA / "qwen2-vl-7b-instruct.chat_template.json").read_text())[
        "chat_template"]


@pytest.fixture(scope="session", params=["qwen2_vl", "qwen2_5_vl"])
def vl_folder(request, tmp_path_factory) -> Path:
    return write_tiny_qwen_vl(tmp_path_factory.mktemp(request.param),
                              chat_template=qwen_vl_template(), family=request.param)


@pytest.fixture(scope="session")
def qwen_folder(tmp_path_factory) -> Path:
    return write_tiny_qwen_vl(tmp_path_factory.mktemp("qwen2_vl"),
                              chat_template=qwen_vl_template())


def load(folder: Path):
    """A fresh load: nothing of an earlier model object (features, positions) kept."""
    return load_folder(folder, available=None)


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
