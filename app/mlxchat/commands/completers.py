"""Argument completion and path handling shared by several commands."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from pathlib import Path

from mlxchat.chat import human_bytes
from mlxchat.commands.base import (
    Candidates,
    CommandContext,
    CommandError,
    ago,
    one_line,
)
from mlxchat.units import plural

SCAN_LIMIT = 2000


def user_path(ctx: CommandContext, text: str) -> Path:
    """A path as the user typed it: '~' expanded, relative to the context's folder."""
    if "\0" in text:
        raise CommandError("A path cannot contain a NUL character.")
    path = Path(text).expanduser()
    return path if path.is_absolute() else ctx.cwd() / path


def complete_path(ctx: CommandContext, prefix: str,
                  suffixes: tuple[str, ...] = ()) -> Candidates:
    """Files and folders whose name starts with what was typed after the last '/'.
    Hidden names only when the typed name starts with '.'; folders end with '/'."""
    typed_dir = prefix[: prefix.rfind("/") + 1]
    start = prefix[len(typed_dir):]
    folder = Path(os.path.expanduser(typed_dir)) if typed_dir else Path(".")
    if not folder.is_absolute():
        folder = ctx.cwd() / folder
    out: Candidates = []
    try:
        with os.scandir(folder) as entries:
            for entry in itertools.islice(entries, SCAN_LIMIT):
                name = entry.name
                if not name.startswith(start) or (name.startswith(".")
                                                   and not start.startswith(".")):
                    continue
                if entry.is_dir():
                    out.append((typed_dir + name + "/", "folder"))
                elif not suffixes or name.lower().endswith(suffixes):
                    out.append((typed_dir + name, human_bytes(entry.stat().st_size)))
    except (OSError, ValueError):
        return []
    return sorted(out)


def complete_sessions(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    """Saved sessions by title ('#ID' when a title is ambiguous or looks like an id)."""
    rows = ctx.conversation.saved.list(limit=200)
    titles = Counter(r.title.casefold() for r in rows)
    now = ctx.now()
    by_id = prefix.startswith("#") or (prefix.isdigit() and prefix.isascii())
    out: Candidates = []
    for r in rows:
        unique = titles[r.title.casefold()] == 1 and not r.title.lstrip("#").isdigit()
        value = r.title if unique and not by_id else f"#{r.id}"
        if by_id and prefix.isdigit():
            value = str(r.id)
        help_text = f"#{r.id} · {plural(r.message_count, 'message')} · {ago(r.updated, now)}"
        if value.startswith("#") or value.isdigit():
            help_text = f"{one_line(r.title, 40)} · {plural(r.message_count, 'message')}"
        out.append((value, help_text))
    return out


def complete_current_title(ctx: CommandContext, words: tuple[str, ...],
                           prefix: str) -> Candidates:
    return [(ctx.conversation.session.title, "the current title")]


def complete_files(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    return complete_path(ctx, prefix)


def complete_json_files(ctx: CommandContext, words: tuple[str, ...],
                        prefix: str) -> Candidates:
    return complete_path(ctx, prefix, (".json",))
