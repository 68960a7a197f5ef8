"""Loading a vision-language model folder through mlx-vlm.

mlx-vlm builds the model (vision tower, projector, language model) and reads
its weights; the tokenizer is mlx-lm's, as for a text model, and the image
processor is the family's own (transformers' PIL one, no torch). The model is
wrapped in ``VisionChat`` so the engine drives it as it drives a text model.

mlx-vlm is installed without its dependencies (``make model``): only what
these code paths import (transformers, Pillow, numpy) is needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlxchat.models.errors import ModelError

FAMILIES = {"qwen2_vl": "Qwen2-VL", "qwen2_5_vl": "Qwen2.5-VL", "qwen3_vl": "Qwen3-VL",
            "gemma3": "Gemma 3", "smolvlm": "SmolVLM", "idefics3": "Idefics3",
            "mistral3": "Mistral 3"}
"""Vision-language families this app drives, by mlx-vlm model type."""


def is_vision_config(config: dict[str, Any]) -> bool:
    """A folder this app loads as a vision-language model: a vision tower of a
    family it drives, and mlx-vlm installed. Other VLM folders (Llama 4, say)
    load through mlx-lm as before, text only."""
    if not config.get("vision_config") or config.get("model_type") not in FAMILIES:
        return False
    try:
        import mlx_vlm  # noqa: F401
    except ImportError:
        return False
    return True


def load_vision(folder: Path, config: dict[str, Any]) -> tuple[Any, Any]:
    """The wrapped model and the tokenizer of a VLM folder (ModelError: one line)."""
    from mlx_lm.utils import load_tokenizer
    from mlx_vlm.utils import load_model as vlm_load

    from mlxchat.models.vision.family import read_json
    from mlxchat.models.vision.model import VisionChat

    read_json(folder, "preprocessor_config.json")
    try:
        vlm = vlm_load(folder)
        tokenizer = load_tokenizer(folder, eos_token_ids=config.get(
            "eos_token_id", config.get("text_config", {}).get("eos_token_id")))
    except (ValueError, FileNotFoundError, KeyError, OSError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelError(f"cannot load the model in {folder}: {reason}") from None
    family = make_family(folder, config, tokenizer)
    if hasattr(family, "settle"):
        family.settle(vlm)  # arrays built lazily on this thread, used on the engine's
    return VisionChat(vlm, family), tokenizer


def keep_features(model: Any, fingerprint: str) -> None:
    """Keep the projected features of the images a family computes again after
    an edit (Gemma 3) on disk, under the model's fingerprint."""
    if getattr(model.family, "disk_features", False):
        from mlxchat.models.vision.features import FeatureStore

        model.keep_features_in(FeatureStore(fingerprint))


def make_family(folder: Path, config: dict[str, Any], tokenizer: Any) -> Any:
    """The family object (``family.VisionFamily``) of a folder whose
    ``model_type`` is in FAMILIES, from that family's module: Gemma 3's,
    SmolVLM's (Idefics3's too), Mistral 3's, Qwen3-VL's (DeepStack), or
    Qwen-VL's for Qwen2-VL and Qwen2.5-VL."""
    model_type = config["model_type"]
    if model_type == "gemma3":
        from mlxchat.models.vision.gemma3 import gemma3_family

        return gemma3_family(folder, config, tokenizer)
    if model_type in ("smolvlm", "idefics3"):
        from mlxchat.models.vision.smolvlm import smolvlm_family

        return smolvlm_family(folder, config, tokenizer)
    if model_type == "mistral3":
        from mlxchat.models.vision.mistral3 import mistral3_family

        return mistral3_family(folder, config, tokenizer)
    if model_type == "qwen3_vl":
        from mlxchat.models.vision.qwen3 import qwen3_family

        return qwen3_family(folder, config, tokenizer)
    from mlxchat.models.vision.qwen import qwen_family

    return qwen_family(folder, config, tokenizer)
