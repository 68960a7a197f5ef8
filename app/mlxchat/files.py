"""Reading, writing and hashing files: bounded reads of what the user names,
private atomic writes and streamed sha256."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

from mlxchat.errors import MlxchatError
from mlxchat.paths import ensure_private_dir

log = logging.getLogger(__name__)

HEAD_BYTES = 8192
"""Bytes read to tell a binary file from text before reading it whole."""


class FileRefused(MlxchatError):
    """A file the user named that is not read: missing, not a regular file, too large."""


class FileTooLarge(FileRefused):
    def __init__(self, message: str, size: int):
        super().__init__(message)
        self.size = size
        """Bytes the file has at least (more than the limit)."""


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def open_nonblocking(path: Path) -> int:
    """A read-only descriptor of ``path`` whose open never waits (a FIFO with no
    writer opens at once); the caller checks ``os.fstat`` for the file type."""
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))


@contextmanager
def _regular_file(path: Path) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """The open file ``path`` names and its stat, or FileRefused (missing, a
    folder, a device, pipe or socket: never blocks on a FIFO)."""
    try:
        fd = open_nonblocking(path)
    except IsADirectoryError:
        raise FileRefused(f"{path} is a folder, not a file.") from None
    except OSError as exc:
        raise FileRefused(f"Cannot read {path}: {exc.strerror or exc}.") from None
    try:
        handle = os.fdopen(fd, "rb")
    except IsADirectoryError:  # Linux opens a folder read-only; fdopen refuses it
        os.close(fd)
        raise FileRefused(f"{path} is a folder, not a file.") from None
    with handle:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FileRefused(f"{path} is a folder, not a file.")
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{path} is not a regular file (a device, pipe or socket).")
        yield handle, info


def _read(handle: BinaryIO, path: Path, size: int) -> bytes:
    try:
        return handle.read(size)
    except OSError as exc:
        raise FileRefused(f"Cannot read {path}: {exc.strerror or exc}.") from None


def read_limited(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or FileRefused.

    Never blocks on a FIFO (opened non-blocking, then refused) and never reads
    more than ``limit + 1`` bytes, so /dev/zero or a growing file cannot fill
    memory. The size on disk is not trusted: /proc files say 0 and have text."""
    path = Path(path)
    with _regular_file(path) as (handle, info):
        if info.st_size > limit:
            raise FileTooLarge(f"{path} is {_size(info.st_size)}, over the {_size(limit)} "
                               "limit.", info.st_size)
        data = _read(handle, path, limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"{path} is over the {_size(limit)} limit.", len(data))
    return data


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of a regular file (what tells text from binary
    at any size), or FileRefused as ``read_limited`` refuses."""
    path = Path(path)
    with _regular_file(path) as (handle, _):
        return _read(handle, path, size)


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


def link_new(tmp: Path, wanted: Path, *, attempts: int = 16) -> Path:
    """Give the finished file ``tmp`` the name ``wanted`` or, when a file has that
    name, a fresh one beside it (``STEM-xxxxxx.SUFFIX``); return the name taken.
    Never replaces a file: another row, another database may own it. ``tmp``
    may be left behind for the caller to remove."""
    name = Path(wanted)
    for _ in range(attempts):
        try:
            os.link(tmp, name)
            return name
        except FileExistsError:
            pass
        except OSError:  # no hard links here (FAT, some network shares)
            if _move_onto_new(tmp, name):
                return name
        name = name.with_name(f"{Path(wanted).stem}-{secrets.token_hex(3)}{name.suffix}")
    raise FileExistsError(errno.EEXIST, "no free file name", str(wanted))


def _move_onto_new(tmp: Path, name: Path) -> bool:
    """Move ``tmp`` onto ``name`` created exclusively now; False when it exists."""
    try:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    try:
        os.replace(tmp, name)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return True


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


def remove_files(paths: Iterable[Path | str]) -> list[str]:
    """Delete each file (a missing one is fine); return those that could not be."""
    left = []
    for path in paths:
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("%s not deleted: %s", path, exc)
            left.append(str(path))
    return left
