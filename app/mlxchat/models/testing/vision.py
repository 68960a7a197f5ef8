"""Tiny random vision-language models for tests and benchmarks.

``write_tiny_qwen_vl(folder, chat_template=...)`` writes a complete model
folder as mlx-vlm reads one (config with ``vision_config``, random weights
built from mlx-vlm's own config classes, as its tests build them), a
byte-level tokenizer with the family's control tokens, and the image
processor's ``preprocessor_config.json``. The chat template and the processor
settings are the caller's (the tests pass the family's published ones); only
the pixel limits are the tiny model's, so an image takes a few tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from mlxchat.models.testing.text import SPECIALS, _byte_chars
from mlxchat.models.tokenizer import write_bpe_tokenizer

QWEN_VL_SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
QWEN2_PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "temporal_patch_size": 2,
    "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711]}
"""Qwen2-VL's published processor settings (less its pixel limits)."""


def _vision(family: str, *, hidden_size: int, depth: int, width: int, patch: int) -> dict:
    vision = {"model_type": family, "depth": depth, "embed_dim": width, "hidden_size": width,
              "num_heads": 2, "image_size": 2 * patch, "patch_size": patch,
              "spatial_patch_size": patch, "spatial_merge_size": 2, "temporal_patch_size": 2,
              "in_channels": 3, "mlp_ratio": 2}
    if family == "qwen2_vl":
        vision["hidden_size"] = hidden_size
    if family == "qwen2_5_vl":
        # A window of 2x2 merged tokens; block 0 attends to the whole image, the
        # others within their window (as the published model alternates them).
        vision.update(intermediate_size=2 * width, out_hidden_size=hidden_size,
                      window_size=2 * 2 * patch, fullatt_block_indexes=[0])
    if family == "qwen3_vl":
        vision.update(intermediate_size=2 * width, out_hidden_size=hidden_size,
                      num_position_embeddings=16, deepstack_visual_indexes=list(range(depth - 1)))
    return vision


def _config(family: str, ids: dict[str, int], vocab: int, hidden_size: int, num_layers: int,
            vision: dict) -> dict[str, Any]:
    text = {"hidden_size": hidden_size, "num_hidden_layers": num_layers,
            "intermediate_size": 2 * hidden_size, "num_attention_heads": 4,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "vocab_size": vocab,
            "max_position_embeddings": 4096, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    tokens = {"image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
              "vision_start_token_id": ids["<|vision_start|>"],
              "vision_end_token_id": ids["<|vision_end|>"]}
    if family == "qwen3_vl":
        # Laid out as the published config: the language model's settings nested.
        head = 16
        text.update(model_type="qwen3_vl_text", head_dim=head, rope_scaling={
            "rope_type": "default", "mrope_interleaved": True,
            "mrope_section": [head // 4, head // 8, head // 8]})
        return {"model_type": family, "tie_word_embeddings": False, **tokens,
                "text_config": text, "vision_config": vision}
    half = hidden_size // 4 // 2  # half a head's dimensions, split over t, h, w (mRoPE)
    sections = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    return {"model_type": family, **text, "rope_scaling": {"type": "mrope",
                                                           "mrope_section": sections},
            **tokens, "vision_config": vision}


def write_tiny_qwen_vl(folder: Path, *, chat_template: str, family: str = "qwen2_vl",
                       processor: dict[str, Any] | None = None, hidden_size: int = 32,
                       num_layers: int = 2, vision_depth: int = 1, vision_width: int = 32,
                       seed: int = 0, min_pixels: int = 28 * 28 * 4,
                       max_pixels: int = 28 * 28 * 64) -> Path:
    """A random Qwen2-VL (``family="qwen2_vl"``), Qwen2.5-VL (``"qwen2_5_vl"``)
    or Qwen3-VL (``"qwen3_vl"``) with a 263-token vocabulary; ``processor`` is
    the family's published processor settings (Qwen2-VL's when None), its
    pixel limits replaced by ``min_pixels``/``max_pixels``."""
    import importlib

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = SPECIALS + QWEN_VL_SPECIALS + _byte_chars()
    ids = {t: i for i, t in enumerate(tokens)}
    settings = {k: v for k, v in (processor or QWEN2_PROCESSOR).items()
                if k not in ("min_pixels", "max_pixels", "size")}
    settings["size"] = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    if family != "qwen2_vl" and vision_depth < 2:
        # Qwen2.5-VL: a windowed block after the full one; Qwen3-VL: a block
        # that feeds DeepStack before the last one feeds the merger.
        vision_depth = 2
    vision = _vision(family, hidden_size=hidden_size, depth=vision_depth, width=vision_width,
                     patch=int(settings["patch_size"]))
    config = _config(family, ids, len(tokens), hidden_size, num_layers, vision)
    module = importlib.import_module(f"mlx_vlm.models.{family}")
    save_random_vlm(folder, module, config, config.get("text_config", config), vision,
                    seed=seed, specials=len(SPECIALS) + len(QWEN_VL_SPECIALS))
    (folder / "preprocessor_config.json").write_text(json.dumps(settings, indent=2))
    write_bpe_tokenizer(folder, tokens=tokens, merges=[],
                        special_ids=list(range(len(SPECIALS) + len(QWEN_VL_SPECIALS))),
                        bos_id=None, eos_id=ids["<|im_end|>"], chat_template=chat_template,
                        unk_id=0)
    return folder


def save_random_vlm(folder: Path, module: Any, config: dict, text: dict, vision: dict, *,
                    seed: int, specials: int) -> Any:
    """A random model of mlx-vlm's ``module`` (its config classes, as its tests
    build them) whose head lets only printable ASCII win (so replies tokenize
    back to the same ids), saved with its config.json in ``folder``."""
    cfg = module.ModelConfig.from_dict(dict(config))
    cfg.text_config = module.TextConfig.from_dict(text)
    cfg.vision_config = module.VisionConfig.from_dict(vision)
    mx.random.seed(seed)
    model = module.Model(cfg)
    printable = [0.0] * specials + [
        1.0 if chr(b).isprintable() and b < 127 or b == 10 else 0.0 for b in range(256)]
    head = model.language_model.lm_head
    head.weight = head.weight * 4.0 * mx.array(printable)[:, None]
    mx.eval(model.parameters())
    mx.save_safetensors(str(folder / "model.safetensors"),
                        dict(tree_flatten(model.parameters())), {"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return model
