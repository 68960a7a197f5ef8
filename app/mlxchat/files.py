"""Writing and hashing files: private atomic writes and streamed sha256."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable

from mlxchat.paths import ensure_private_dir


def write_private_text(path: Path, text: str) -> Path:
    """Write ``text`` atomically (temp file in the same folder, fsync, rename),
    readable by the owner only. A failure leaves the old file and no temp file."""
    path = Path(path)
    ensure_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def sha256_file(path: Path, *, on_progress: Callable[[int, int], None] | None = None) -> str:
    """Hex sha256 of a file, read in 8 MB blocks; ``on_progress(done, total)``."""
    total = os.path.getsize(path)
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            h.update(block)
            done += len(block)
            if on_progress:
                on_progress(done, total)
    return h.hexdigest()
