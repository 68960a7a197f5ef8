"""Finding the files under the paths given to a collection.

Folders are walked depth first in name order; symlinks are followed, but a
folder already visited (a symlink loop, or the same folder twice) is skipped
and counted, as are folders that cannot be listed. Hidden entries and the
usual build and tool folders are passed over silently.
"""

from __future__ import annotations

import os
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


def walk(roots: Sequence[Path]) -> Walk:
    result = Walk()
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[Path] = set()

    def add_file(path: Path) -> None:
        if path not in seen_files:
            seen_files.add(path)
            result.files.append(path)

    def visit(folder: Path) -> None:
        try:
            info = folder.stat()
        except OSError as exc:
            result.skipped.append(Skipped(str(folder), exc.strerror or "cannot be read"))
            return
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
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError as exc:
                result.skipped.append(Skipped(str(path), exc.strerror or "cannot be read"))
                continue
            if is_dir:
                visit(path)
            elif is_file:
                add_file(path)
            elif entry.is_symlink():
                result.skipped.append(Skipped(str(path), "broken or looping symlink"))

    for root in roots:
        if root.is_dir():
            visit(root)
        else:
            add_file(root)
    return result
