"""Where mlxchat keeps its files. Functions, never values fixed at import time.

``MLXCHAT_HOME`` puts everything (config, data, cache) under one folder; it is
what the tests use. Otherwise the XDG locations (or ``~/Library`` on macOS).
"""

from __future__ import annotations

import errno
import os
import re
import sys
from pathlib import Path


def _home() -> Path | None:
    value = os.environ.get("MLXCHAT_HOME")
    return Path(value).expanduser() if value else None


def _base(kind: str, xdg_var: str, xdg_default: str, mac: str) -> Path:
    home = _home()
    if home is not None:
        return home / kind
    if sys.platform == "darwin":
        return Path.home() / mac / "mlxchat"
    root = os.environ.get(xdg_var) or str(Path.home() / xdg_default)
    return Path(root) / "mlxchat"


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` readable by the owner only, and every missing folder above
    it too (``mkdir(parents=True)`` would give those the umask's mode): chats are
    private. A folder that already existed keeps its mode: it may be the user's."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()][::-1]
    for folder in missing:
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # made by someone else meanwhile: not ours to change
        _chmod_private(folder)  # a umask without the owner's bits narrows mkdir's mode
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path))
    return path


def _chmod_private(folder: Path) -> None:
    try:
        folder.chmod(0o700)
    except OSError:
        pass


def config_dir() -> Path:
    return _base("config", "XDG_CONFIG_HOME", ".config", "Library/Application Support")


def data_dir() -> Path:
    return _base("data", "XDG_DATA_HOME", ".local/share", "Library/Application Support")


def cache_dir() -> Path:
    return _base("cache", "XDG_CACHE_HOME", ".cache", "Library/Caches")


def config_file() -> Path:
    return config_dir() / "config.toml"


def mcp_config_file() -> Path:
    """The MCP servers whose tools the model may use (``{"mcpServers": {...}}``)."""
    return config_dir() / "mcp.json"


def tool_logs_dir() -> Path:
    """What each MCP server writes to its stderr, one file per server."""
    return cache_dir() / "mcp-logs"


def user_catalog_file() -> Path:
    """Local model aliases registered by ``mlxchat import --name``."""
    return config_dir() / "models.toml"


def database_file() -> Path:
    return data_dir() / "sessions.db"


def kv_dir() -> Path:
    """The KV cache files of saved sessions: their segments, pinned prefixes and
    old whole-cache snapshots (the folder keeps its first name, ``snapshots``:
    rows written since hold paths under it)."""
    return data_dir() / "snapshots"


def images_dir() -> Path:
    """Images messages show a vision-language model, each stored once by the
    sha256 of its bytes."""
    return data_dir() / "images"


def image_file(digest: str) -> Path:
    """Where the image with this sha256 (hex) is kept."""
    return images_dir() / digest


def kv_file_name(path: Path | str) -> str | None:
    """How a KV cache file is recorded: its path relative to the data folder
    ('snapshots/NAME'), or None when it does not lie inside ``kv_dir()``."""
    resolved = inside_kv_dir(Path(path))
    if resolved is None:
        return None
    return str(Path("snapshots") / resolved.relative_to(kv_dir().resolve()))


def kv_file(recorded: str) -> Path | None:
    """The file a recorded KV file name stands for in this home, or None when the
    name (absolute, '..', a link) leads anywhere but into ``kv_dir()``."""
    if not recorded or Path(recorded).is_absolute():
        return None
    return inside_kv_dir(data_dir() / recorded)


def inside_kv_dir(path: Path) -> Path | None:
    """``path`` resolved, if it is a file name inside this home's ``kv_dir()``."""
    try:
        folder = kv_dir().resolve()
        resolved = path.resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if resolved == folder or not resolved.is_relative_to(folder):
        return None
    return resolved


KV_TEMP = re.compile(r"^\..+\.(\d+)\.tmp\.safetensors$")
"""A KV cache file being written: '.NAME.PID.tmp.safetensors' (given its name when complete)."""


def kv_temp_file(path: Path, pid: int) -> Path:
    """Where the KV cache file ``path`` is written before its rename."""
    return path.with_name(f".{path.stem}.{pid}.tmp.safetensors")


def exports_dir() -> Path:
    """Where ``/export`` and ``mlxchat sessions export`` write when given no path."""
    return data_dir() / "exports"


def models_cache_dir() -> Path:
    """Converted models, one folder per source file hash and converter version."""
    return cache_dir() / "models"
