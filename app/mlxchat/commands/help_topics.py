"""Which commands /help lists together, in the order a newcomer needs them.

Each command's one line of meaning is its own ``Command.help``; this module
only groups them. A command in no group (one a UI or a test adds) is listed
under ``OTHER``, so nothing is ever left out of /help.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlxchat.commands.base import Command

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Chat", ("retry", "edit", "undo", "copy", "system", "think", "attach", "image")),
    ("Sessions", ("new", "sessions", "open", "rename", "delete", "fork", "branch", "export",
                  "import")),
    ("Model and settings", ("model", "models", "set", "get", "draft")),
    ("Context, cache and figures", ("context", "compact", "recall", "stats", "cache", "pin",
                                    "pins", "unpin")),
    ("Documents, tools and the API", ("docs", "sources", "tools", "serve")),
    ("mlxchat", ("help", "quit")),
)
OTHER = "Other"

Section = tuple[str, list[tuple[str, str]]]
"""A heading and its (usage, meaning) rows."""


def grouped(commands: Sequence[Command]) -> list[Section]:
    """The commands under their headings, each with its usage and meaning."""
    by_name = {c.name: c for c in commands}
    placed: set[str] = set()
    sections: list[Section] = []
    for title, names in GROUPS:
        members = [by_name[name] for name in names if name in by_name]
        placed.update(c.name for c in members)
        if members:
            sections.append((title, [(c.usage_line, c.help) for c in members]))
    rest = [(c.usage_line, c.help) for c in commands if c.name not in placed]
    return sections + ([(OTHER, rest)] if rest else [])


def help_markdown(sections: Sequence[Section]) -> str:
    """The sections as Markdown: a heading each, one bullet a command (it wraps)."""
    out = ["/help NAME explains one; // at the start of a message sends a literal /."]
    for title, rows in sections:
        out += ["", f"**{title}**", ""]
        out += [f"- `{usage}` — {meaning}" for usage, meaning in rows]  # code: '[x]' as typed
    return "\n".join(out)
