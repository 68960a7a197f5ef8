"""Find the GGUF models other apps already downloaded: Ollama's store and LM Studio's
folders (``~/.lmstudio/models``, older ``~/.cache/lm-studio/models``; the
``LMSTUDIO_MODELS`` variable points at another one)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from mlxchat.models import ollama
from mlxchat.models.errors import ModelError


@dataclass(frozen=True)
class FoundModel:
    store: str
    """'ollama' or 'lmstudio'."""
    spec: str
    """What to give `mlxchat import` (ollama:NAME:TAG or the file path)."""
    size_bytes: int | None
    quantization: str
    importable: bool
    why: str = ""
    """Why not, when it cannot be imported."""


def lmstudio_dirs() -> list[Path]:
    env = os.environ.get("LMSTUDIO_MODELS")
    if env:
        return [Path(env).expanduser()]
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def _quantization(header) -> str:
    import gguf

    file_type = header.metadata.get("general.file_type")
    try:
        return gguf.LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        counts = Counter(t.type_name for t in header.tensors if len(t.shape) == 2)
        return counts.most_common(1)[0][0] if counts else "?"


def inspect(store: str, spec: str, path: Path) -> FoundModel:
    """Read one GGUF's header, its arrays stepped over (``gguf.summary``): its
    quantization and whether we can import it."""
    from mlxchat.models.gguf.importer import check_file
    from mlxchat.models.gguf.summary import read_summary

    size = path.stat().st_size if path.is_file() else None
    try:
        header = read_summary(path)
    except ModelError as exc:
        return FoundModel(store, spec, size, "?", False, str(exc))
    try:
        check_file(header)
    except ModelError as exc:
        return FoundModel(store, spec, size, _quantization(header), False, str(exc))
    return FoundModel(store, spec, size, _quantization(header), True)


def scan() -> list[FoundModel]:
    """Every GGUF in Ollama's store and LM Studio's folders (projectors skipped)."""
    found = []
    for item in ollama.list_local():
        if isinstance(item, tuple):
            found.append(FoundModel("ollama", f"ollama:{item[0]}", None, "?", False, item[1]))
        else:
            found.append(inspect("ollama", f"ollama:{item.ref}", item.gguf))
    for root in lmstudio_dirs():
        for path in sorted(root.rglob("*.gguf")) if root.is_dir() else []:
            if not path.name.lower().startswith("mmproj"):
                found.append(inspect("lmstudio", str(path), path))
    return found
