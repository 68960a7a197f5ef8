"""The compute-dtype policy: the float type activations and the KV cache use.

MLX computes in the dtype of a model's float parameters (a quantized layer's
scales, norms, float embeddings): left alone, a GGUF whose Q5_0/Q8_0 scales are
float16 would compute in float16, whatever the family was trained in. So the
dtype is chosen here, apart from how the file stores its scales, and every float
parameter is cast to it:

- CPU: float32. Half-precision quantized matmuls are far slower on the Linux
  CPU backend, and float32 is the reference llama.cpp's CPU path computes in
  (bench/model.py measures the cost: ``fp32_cost``).
- GPU: the dtype the family was trained in (bfloat16 for Gemma, Qwen, Llama 3,
  gpt-oss, Mistral), never float16 for families known to overflow in it.

``/set compute_dtype`` overrides it per session (``info.recast``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

__all__ = ["apply", "default_dtype", "gpu_dtype"]

TRAINED_IN = {
    "gemma": "bfloat16", "gemma2": "bfloat16", "gemma3": "bfloat16", "gemma3_text": "bfloat16",
    "qwen2": "bfloat16", "qwen2_moe": "bfloat16", "qwen3": "bfloat16", "qwen3_moe": "bfloat16",
    "llama": "bfloat16", "gpt_oss": "bfloat16", "mistral": "bfloat16",
}
"""Families whose released weights are bfloat16 (a GGUF does not say; its config
records this table's answer)."""
OVERFLOWS_IN_FLOAT16 = ("gemma", "gemma2", "gemma3", "gemma3_text")
"""Families whose activations exceed float16's 65504 (Gemma's embedding scale)."""


def gpu_dtype(config: dict) -> str:
    """The dtype a model computes in on a GPU: what its config records (our GGUF
    import writes ``compute_dtype``), else its ``torch_dtype``, else the family's."""
    cfg = config.get("text_config", config)
    family = config.get("model_type") or cfg.get("model_type") or ""
    recorded = (config.get("compute_dtype") or {}).get("gpu")
    trained = config.get("torch_dtype") or config.get("dtype") or cfg.get("torch_dtype")
    dtype = recorded or (trained if trained in ("bfloat16", "float16") else None)
    dtype = dtype or TRAINED_IN.get(family, "bfloat16")
    if dtype == "float16" and family in OVERFLOWS_IN_FLOAT16:
        return "bfloat16"
    return dtype


def default_dtype(config: dict, *, cpu: bool) -> str:
    """The policy's dtype for a model with ``config`` on this kind of device."""
    return "float32" if cpu else gpu_dtype(config)


def import_record(model_type: str) -> dict[str, str]:
    """What an imported model's config.json records as ``compute_dtype``."""
    return {"cpu": "float32", "gpu": gpu_dtype({"model_type": model_type})}


def bytes_per_value(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def current_dtype(model: nn.Module) -> str:
    """The dtype the model computes in now: its first float parameter's. Asked
    before every turn: the walk stops at that parameter instead of flattening
    every parameter (1.1 ms against 0.01 ms on the bundled model)."""
    found = _first_float(model)
    return "float32" if found is None else str(found.dtype).removeprefix("mlx.core.")


def _first_float(tree: Any) -> mx.array | None:
    """The first float array in ``parameters()`` order (a module is a dict of
    its children; names starting with '_' are not parameters)."""
    if isinstance(tree, mx.array):
        return tree if mx.issubdtype(tree.dtype, mx.floating) else None
    if isinstance(tree, dict):
        items = [v for k, v in tree.items() if not str(k).startswith("_")]
    elif isinstance(tree, (list, tuple)):
        items = list(tree)
    else:
        return None
    for value in items:
        found = _first_float(value)
        if found is not None:
            return found
    return None


def _source_floats(model: nn.Module, folder: Path | None) -> dict[str, mx.array]:
    """The folder's float arrays by parameter name (lazy): a recast starts from
    the stored values, so float16 -> bfloat16 -> float16 gives the file's back."""
    if folder is None:
        return {}
    weights: dict[str, mx.array] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        weights.update(mx.load(str(f)))
    if hasattr(model, "sanitize"):
        try:
            weights = model.sanitize(weights)
        except (KeyError, ValueError):
            return {}
    return {k: v for k, v in weights.items() if mx.issubdtype(v.dtype, mx.floating)}


def apply(model: nn.Module, dtype: str, *, folder: Path | None = None) -> None:
    """Cast every float parameter of ``model`` to ``dtype``, quantized layers'
    scales and biases too (MLX promotes mixed dtypes: one float32 scale turns
    the activations after it float32). ``folder``: start from the stored
    weights where names and shapes match, not from the values in memory."""
    target = getattr(mx, dtype)
    source = _source_floats(model, folder)
    updates = []
    for name, value in tree_flatten(model.parameters()):
        if not mx.issubdtype(value.dtype, mx.floating):
            continue
        stored = source.get(name)
        base = stored if stored is not None and stored.shape == value.shape else value
        if base.dtype != target or base is not value:
            updates.append((name, base.astype(target)))
    if updates:
        model.load_weights(updates, strict=False)
        mx.eval(model.parameters())
