"""mlx-vlm is installed without its dependencies: the vision path imports in
the installed venv with only what it needs, and none of the heavy ones."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from .conftest import DATA

PROBE = """
import sys
from mlxchat.models import vision_load, vision_images, vision_model
import mlx_vlm.models.qwen2_vl, mlx_vlm.models.qwen2_5_vl, mlx_vlm.utils
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
heavy = sorted(m for m in ("cv2", "datasets", "torch", "torchvision", "mlx_audio", "gradio",
                           "fastapi", "llguidance") if m in sys.modules)
print("heavy:", ",".join(heavy))
"""


def test_the_vision_path_imports_without_the_heavy_dependencies():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "heavy:"


def test_the_template_is_the_published_one():
    raw = (DATA / "qwen2-vl-7b-instruct.chat_template.json").read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest()
    assert blob == "732bd68bc5427d1fb6c06a59b3bf2456b2155d24"
