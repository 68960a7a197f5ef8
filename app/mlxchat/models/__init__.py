"""Models: resolve a spec (alias, HF repo, folder, .gguf) to a loaded MLX model.

By concept: ``gguf/`` reads and imports GGUF files, ``vision/`` drives
vision-language models (a module per family), ``testing/`` writes tiny random
models for tests and benchmarks. At the root: where a model comes from
(``resolve``, ``catalog``, ``hub``, ``ollama`` and ``ollama_template``,
``scan`` and ``report``), loading it (``loader``, ``info``, ``memory``,
``precision``, ``sharding``, ``cpu_matmul``), its tokenizer and defaults (``tokenizer``, ``sampling``,
``token_floor``), and the markup of its replies (``markup``, ``tools``,
``tool_prompt``); ``errors`` holds the one error they raise.

Names are imported on first use so that listing the catalog does not pay for
importing mlx-lm (about a second).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlxchat.models.catalog import CatalogEntry, add_user_alias, remove_user_alias
    from mlxchat.models.errors import ModelError
    from mlxchat.models.gguf.importer import bundled_gguf
    from mlxchat.models.info import LoadedModel, ModelInfo
    from mlxchat.models.loader import load_folder
    from mlxchat.models.resolve import (
        ModelEntry,
        convert_checkpoint,
        import_gguf,
        list_models,
        load_model,
        load_sharded,
        resolve_folder,
    )

_EXPORTS = {
    "ModelError": "errors",
    "LoadedModel": "info", "ModelInfo": "info",
    "load_folder": "loader",
    "CatalogEntry": "catalog", "add_user_alias": "catalog", "remove_user_alias": "catalog",
    "bundled_gguf": "gguf.importer",
    "ModelEntry": "resolve", "load_model": "resolve", "list_models": "resolve",
    "import_gguf": "resolve", "convert_checkpoint": "resolve", "resolve_folder": "resolve",
    "load_sharded": "resolve",
}
__all__ = sorted(_EXPORTS)

STAGE_LABELS = {"hash": "checking", "convert": "converting", "write": "writing",
                "vocab": "reading the vocabulary of the",
                "download": "downloading", "load": "loading"}
"""Words for the ``progress(stage, done, total)`` stages of load_model and friends."""


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mlxchat.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"mlxchat.models.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
