"""mlx-vlm is installed without its dependencies: the vision path imports in
the installed venv with only what it needs, and none of the heavy ones."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from .conftest import DATA

PROBE = """
import sys
from mlxchat.models.vision import images, load, model, qwen, qwen3, mistral3
import mlx_vlm.models.qwen2_vl, mlx_vlm.models.qwen2_5_vl, mlx_vlm.models.qwen3_vl, mlx_vlm.utils
import mlx_vlm.models.mistral3, mlx_vlm.models.pixtral.image_processing_pixtral
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


def test_the_other_families_data_is_the_published_one():
    """data/SOURCES.md: Qwen3-VL's template text, and the processor settings."""
    import json

    text = (DATA / "qwen3-vl-8b-instruct.chat_template.jinja").read_bytes()
    assert hashlib.sha256(text).hexdigest() == (
        "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4")
    qwen3 = json.loads((DATA / "qwen3-vl-8b-instruct.preprocessor_config.json").read_text())
    assert (qwen3["patch_size"], qwen3["merge_size"], qwen3["size"]["shortest_edge"]) == (
        16, 2, 65536)
    qwen25 = json.loads((DATA / "qwen2.5-vl-7b-instruct.preprocessor_config.json").read_text())
    assert (qwen25["patch_size"], qwen25["min_pixels"], qwen25["max_pixels"]) == (
        14, 3136, 12845056)


def test_mistral3_data_is_the_published_one():
    """data/SOURCES.md: Mistral Small 3.1's template, Mistral Small 3's processor settings."""
    import json

    text = (DATA / "mistral-small-3.1-24b-instruct-2503.chat_template.jinja").read_bytes()
    assert hashlib.sha256(text).hexdigest() == (
        "773c8c8c2ffb59c8d1069fe423733d2007a88c52d0a838d89e6aae6693b97427")
    raw = (DATA / "mistral-small-3.preprocessor_config.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == (
        "c4497eba07fc4cdecf1ddcd7ac3e31301579a98bb1daa359399b0b23e8c692e7")
    pre = json.loads(raw)
    assert (pre["patch_size"], pre["size"], pre["resample"]) == (
        {"height": 14, "width": 14}, {"longest_edge": 1540}, 3)
