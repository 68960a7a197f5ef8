"""Load an MLX model folder into memory, in the precision this device runs best,
after checking that it fits this machine's memory at its context."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.utils import load_model, load_tokenizer, maybe_set_recommended_wired_limit

from mlxchat import blas, native
from mlxchat.models import memory, precision
from mlxchat.models.vision import load as vision_load
from mlxchat.models.errors import ModelError
from mlxchat.models.info import LoadedModel, describe, on_cpu
from mlxchat.models.sampling import ModelSampling, from_folder
from mlxchat.models.sharding import ShardPlan, apply_plan, split_fingerprint
from mlxchat.native import fused

__all__ = ["load_folder"]

_UNSET: Any = object()


def _config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {folder / 'config.json'}: {exc}") from None


def _fit(folder: Path, config: dict, name: str, context_window: int | None,
         available: memory.Available | None, compute_dtype: str,
         ranks: int = 1) -> memory.Fit:
    """The context that fits; split over ``ranks``, each rank holds its share
    of the weights and of the KV cache (heads or layers)."""
    cfg = config.get("text_config", config)
    native = int(config.get("max_position_embeddings") or cfg.get("max_position_embeddings")
                 or 4096)
    layout = memory.kv_layout(config, precision.bytes_per_value(compute_dtype))
    if ranks > 1:
        layout = layout.scaled(1, ranks)
        name = f"{name} (one of {ranks} ranks)"
    return memory.fit_context(name, -(-memory.folder_weights_bytes(folder) // ranks), layout,
                              context_window or native, available,
                              asked=context_window is not None)


def load_folder(folder: Path, *, name: str | None = None, spec: str | None = None,
                context_window: int | None = None, rope_scaling: dict | None = None,
                available: memory.Available | None = _UNSET,
                split: tuple[ShardPlan, Any] | None = None,
                compute_dtype: str | None = None,
                sampling: ModelSampling | None = None) -> LoadedModel:
    """Load the MLX model in ``folder`` (config.json, *.safetensors, tokenizer).

    Refuses (ModelError, one line with the numbers) a model whose weights leave
    no room for a usable context in ``available`` memory (default: what this
    machine can give now); a context that does not fit is lowered to the largest
    that does (``info.memory_note`` says so), one asked for explicitly is refused.
    ``rope_scaling`` replaces the config's (e.g. YaRN to stretch the window).
    ``split`` (a plan ``sharding.plan_split`` made for this config, and an
    ``mx.distributed`` group) loads only this rank's shard: the memory fit
    counts one rank's share before any weight is read.
    ``compute_dtype`` overrides the policy's (models/precision.py). ``sampling``
    (the catalog's, measured) replaces the folder's generation_config.json.
    """
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ModelError(f"{folder} is not an MLX model folder (no config.json)")
    config = _config(folder)
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    if available is _UNSET:
        available = memory.available_memory()
    default = precision.default_dtype(config, cpu=on_cpu())
    dtype = compute_dtype or default
    fit = _fit(folder, config, name or folder.name, context_window, available, dtype,
               ranks=split[1].size() if split else 1)
    blas.warn_once()  # the model is good and MLX is about to compute: why it is slow here
    native.warn_once()
    vision = vision_load.is_vision_config(config)
    if vision:
        if split is not None:
            raise ModelError("a vision-language model cannot be split over ranks yet")
        model, tokenizer = vision_load.load_vision(folder, config)
    else:
        try:
            model, config = load_model(folder, lazy=split is not None, model_config=(
                {"rope_scaling": rope_scaling} if rope_scaling is not None else None))
            if split is not None:
                apply_plan(model, *split)
                mx.eval(model.parameters())
            tokenizer = load_tokenizer(folder, eos_token_ids=config.get("eos_token_id"))
        except (ValueError, FileNotFoundError, KeyError, OSError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ModelError(f"cannot load the model in {folder}: {reason}") from None
    precision.apply(model, dtype)
    if on_cpu():
        fused.install()  # one op each for rms_norm, rope, attention (Linux, when built)
    else:
        # As mlx-lm does: keep the weights wired (a no-op where the device
        # reports no recommended working set).
        maybe_set_recommended_wired_limit()
    config = {**config, "max_position_embeddings": fit.context}
    info = describe(model, tokenizer, config, name=name or folder.name,
                    spec=spec or str(folder), path=folder, default_compute_dtype=default)
    if vision:
        vision_load.keep_features(model, info.fingerprint)
    if split is not None:
        info = replace(info, fingerprint=split_fingerprint(info.fingerprint, split[0],
                                                           split[1].rank()))
    own = sampling if sampling is not None and sampling.named() else from_folder(folder)
    return LoadedModel(model=model, tokenizer=tokenizer,
                       info=replace(info, memory_note=fit.note, sampling=own,
                                    needed_bytes=fit.needed_bytes))
