"""Load an MLX model folder into memory, in the precision this device runs best."""

from __future__ import annotations

from pathlib import Path

from mlx_lm.utils import load_model, load_tokenizer

from mlxchat.models.errors import ModelError
from mlxchat.models.info import (LoadedModel, describe, on_cpu, use_cpu_precision,
                                 use_gpu_precision)

__all__ = ["ModelError", "load_folder"]


def load_folder(folder: Path, *, name: str | None = None, spec: str | None = None,
                context_window: int | None = None) -> LoadedModel:
    """Load the MLX model in ``folder`` (config.json, *.safetensors, tokenizer)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ModelError(f"{folder} is not an MLX model folder (no config.json)")
    try:
        model, config = load_model(folder)
        tokenizer = load_tokenizer(folder, eos_token_ids=config.get("eos_token_id"))
    except (ValueError, FileNotFoundError, KeyError, OSError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelError(f"cannot load the model in {folder}: {reason}") from None
    if on_cpu():
        use_cpu_precision(model)
    else:
        use_gpu_precision(model)
    if context_window:
        config = {**config, "max_position_embeddings": context_window}
    info = describe(model, tokenizer, config, name=name or folder.name,
                    spec=spec or str(folder), path=folder)
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)
