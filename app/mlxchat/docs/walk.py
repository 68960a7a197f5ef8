"""Finding the files under the paths given to a collection.

Folders are walked depth first in name order. Nothing outside a given folder
is read: a symlink whose target lies outside it is skipped and named, unless
the user asked to follow links (``follow_links``). A folder already visited
(a symlink loop, or the same folder twice), a broken link, a folder that
cannot be listed, and anything but a regular file or a folder (a FIFO, a
device, a socket: never opened) are skipped and named. Hidden entries and the
usual build and tool folders are passed over silently.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from mlxchat.docs.errors import DocsError

PASSED_OVER = {"node_modules", "__pycache__", "venv", "site-packages", "dist", "build",
               "target"}


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str
    """Why, without the path (the line that shows it names it) or a full stop."""

    @classmethod
    def because(cls, path: str, message: str) -> Skipped:
        """From an error's one line, which names the path ('PATH is a binary file.')."""
        text = message.strip().removesuffix(".").removesuffix("; skipped")
        for lead in (f"{path} is ", f"{path} "):
            if text.startswith(lead):
                text = text[len(lead):]
                break
        text = text.replace(f" {path}", "")  # 'Cannot read PATH: ...' -> 'Cannot read: ...'
        return cls(path, text[:1].lower() + text[1:])


@dataclass
class Walk:
    files: list[Path] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    complete: bool = True
    """False when a folder could not be listed: its files are not known gone."""


def check_roots(roots: Sequence[str | Path]) -> list[Path]:
    """The roots as absolute paths; a missing one is a DocsError (nothing done)."""
    if not roots:
        raise DocsError("Give at least one file or folder to index.")
    found = []
    for root in roots:
        path = Path(os.path.abspath(os.path.expanduser(str(root))))
        if not path.exists():
            raise DocsError(f"No such file or folder: {root}")
        found.append(path)
    return found


def not_a_file(mode: int) -> str | None:
    """Why an entry of this mode is never opened (None: a regular file or a folder)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO), not a file: not read"
    if stat.S_ISSOCK(mode):
        return "a socket, not a file: not read"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a file: not read"
    return "not a regular file: not read"


def _inside(target: str, boundary: str) -> bool:
    return target == boundary or target.startswith(boundary.rstrip(os.sep) + os.sep)


def _link_target(path: Path, boundary: str, follow_links: bool) -> tuple[os.stat_result | None,
                                                                         str | None]:
    """A symlink's target's stat, or why it is skipped."""
    target = os.path.realpath(path)
    if not follow_links and not _inside(target, boundary):
        return None, (f"a symlink to {target}, outside {boundary}: not followed "
                      "(--follow-links follows it)")
    try:
        return os.stat(path), None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, "symlink loop"
        if exc.errno == errno.ENOENT:
            return None, f"a broken symlink (its target {target} does not exist)"
        return None, exc.strerror or "cannot be read"


def walk(roots: Sequence[Path], *, follow_links: bool = False) -> Walk:
    """The files under ``roots`` (each a folder or a file the user named)."""
    result = Walk()
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[tuple[int, int]] = set()

    def add_file(path: Path, info: os.stat_result) -> None:
        if (info.st_dev, info.st_ino) not in seen_files:
            seen_files.add((info.st_dev, info.st_ino))
            result.files.append(path)

    def visit(folder: Path, info: os.stat_result, boundary: str) -> None:
        key = (info.st_dev, info.st_ino)
        if key in seen_dirs:
            result.skipped.append(Skipped(str(folder), "symlink loop or folder seen twice"))
            return
        seen_dirs.add(key)
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            result.complete = False
            result.skipped.append(Skipped(str(folder), exc.strerror or "cannot be listed"))
            return
        for entry in entries:
            if entry.name.startswith(".") or entry.name in PASSED_OVER:
                continue
            path = folder / entry.name
            try:
                if entry.is_symlink():
                    found, why = _link_target(path, boundary, follow_links)
                else:
                    found, why = entry.stat(follow_symlinks=False), None
            except OSError as exc:
                found, why = None, exc.strerror or "cannot be read"
            why = why or not_a_file(found.st_mode)
            if why is not None:
                result.skipped.append(Skipped(str(path), why))
            elif stat.S_ISDIR(found.st_mode):
                visit(path, found, boundary)
            else:
                add_file(path, found)

    for root in roots:
        try:
            info = os.stat(root)  # a root the user named is taken where it leads
        except OSError as exc:
            result.skipped.append(Skipped(str(root), exc.strerror or "cannot be read"))
            continue
        why = not_a_file(info.st_mode)
        if why is not None:
            result.skipped.append(Skipped(str(root), why))
        elif stat.S_ISDIR(info.st_mode):
            visit(root, info, os.path.realpath(root))
        else:
            add_file(root, info)
    return result
