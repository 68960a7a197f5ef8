"""Export a session to Markdown (readable) or JSON (lossless), and import JSON back.

Markdown holds the current branch. JSON holds everything: every branch, message
ids and parents, stats, settings; ``import_json`` makes a new session from it
with new ids. Files are written atomically (temp file + rename), mode 0600, and
never outside the folder the caller chose.
"""

from __future__ import annotations

import json
import math
import os
import time
import types
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from mlxchat import __version__
from mlxchat.chat import Message, Pin, Session, calls_text, quoted, tool_label
from mlxchat.files import FileRefused, read_limited, write_private_text
from mlxchat.generation import GenerationSettings
from mlxchat.sources import Source, cite, without_sources
from mlxchat.store.errors import StoreError
from mlxchat.store.rows import ROLES, calls_from_json, calls_to_json
from mlxchat.store.sessions import SessionStore
from mlxchat.turn_stats import TurnStats
from mlxchat.units import fmt_tps

ExportFormat = Literal["md", "json"]
FORMATS: tuple[str, ...] = ("md", "json")
FORMAT_NAME = "mlxchat-session"
FORMAT_VERSION = 1
FILENAME_BYTES = 100
IMPORT_LIMIT_BYTES = 256 << 20
"""Largest file ``import_json`` reads; a session export is far smaller."""
_INT64 = 2**63


# -- Markdown ------------------------------------------------------------------


def markdown_stats_line(stats: TurnStats, cancelled: bool = False) -> str:
    """Under a reply in the Markdown export (plain figures, unlike the transcript's):
    '_ttft 0.12 s · 45.1 tok/s · 132 tokens · reused 1200/1250 · warm_'."""
    parts = [
        f"ttft {stats.ttft_s:.2f} s",
        fmt_tps(stats.decode_tps),
        f"{stats.generated_tokens} token" + ("" if stats.generated_tokens == 1 else "s")
        + (f" ({stats.reasoning_tokens} thinking)" if stats.reasoning_tokens else ""),
    ]
    if stats.prompt_tokens:
        parts.append(f"reused {stats.reused_tokens}/{stats.prompt_tokens}")
    parts.append(stats.cache_source)
    if stats.kv_bits:
        parts.append(f"kv {stats.kv_bits}-bit")
    if cancelled or stats.finish_reason != "stop":
        parts.append("cancelled" if cancelled else stats.finish_reason)
    return "_" + " · ".join(parts) + "_"


def _when(timestamp: float | None) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else "?"


def session_markdown(session: Session) -> str:
    """The session's header and its current branch as Markdown."""
    settings = " · ".join(f"{k} {v}" for k, v in session.settings.to_dict().items())
    out = [
        f"# {session.title}",
        "",
        f"- **Model:** {session.model or '?'}",
        f"- **Created:** {_when(session.created)} · **Updated:** {_when(session.updated)}",
        f"- **Settings:** {settings}",
    ] + [f"- **Pinned document:** {pin.name} ({pin.tokens:,} tokens; its text is in the "
         "JSON export)" for pin in session.pins]
    if session.system_prompt:
        out += ["- **System prompt:**", ""] + [
            "> " + line for line in session.system_prompt.splitlines()
        ]

    out += ["", "---"]
    sources: list[Source] | None = None
    for message in session.messages:
        if message.role == "tool":  # a quoted block under its tool's name
            out += ["", f"### {tool_label(message).capitalize()}", "", quoted(message.content)]
            continue
        out += ["", f"### {message.role.capitalize()}"]
        if message.reasoning:
            out += ["", "#### Thinking", "", quoted(message.reasoning)]
            out += ["", "#### Answer"]
        if message.role == "user":
            sources = message.sources
            text = without_sources(message.content) if sources else message.content
            out += ["", text.rstrip()] + _sources_markdown(sources)
        else:
            out += ["", cite(message.content, sources).rstrip()]
        if message.tool_calls:
            out += ["", "#### Tool calls", "", calls_text(message.tool_calls)]
        if message.stats is not None:
            out += ["", markdown_stats_line(message.stats, message.cancelled)]
        elif message.cancelled:
            out += ["", "_cancelled_"]
    return "\n".join(out) + "\n"


def _sources_markdown(sources: list[Source] | None) -> list[str]:
    """What a message retrieved: each source's line and its text as sent, quoted."""
    if not sources:
        return []
    out = ["", f"#### Sources ({sources[0].collection}, {sum(s.tokens for s in sources):,} "
           "tokens)"]
    for s in sources:
        out += ["", s.describe(), "", quoted(s.text.strip())]
    return out


# -- JSON ----------------------------------------------------------------------


def _message_dict(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "parent_id": message.parent_id,
        "role": message.role,
        "content": message.content,
        "token_count": message.token_count,
        "stats": message.stats.to_dict() if message.stats is not None else None,
        "cancelled": message.cancelled,
        "created": message.created,
        **({"reasoning": message.reasoning} if message.reasoning else {}),
        **({"sources": [s.to_dict() for s in message.sources]} if message.sources else {}),
        **({"tool_calls": json.loads(calls_to_json(message.tool_calls) or "[]")}
           if message.tool_calls else {}),
        **({"tool_call_id": message.tool_call_id, "tool_name": message.tool_name}
           if message.role == "tool" else {}),
    }


def session_document(store: SessionStore, session_id: int) -> dict[str, Any]:
    """The whole session, every branch included, as a JSON-ready dict."""
    session = store.get_session(session_id)
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "app": f"mlxchat {__version__}",
        "exported": time.time(),
        "session": {
            "title": session.title,
            "title_locked": session.title_locked,
            "model": session.model,
            "system_prompt": session.system_prompt,
            # Whole texts: the documents as the model saw them, not where they were.
            "pins": [{"name": p.name, "path": p.path, "text": p.text, "tokens": p.tokens}
                     for p in session.pins],
            "settings": session.settings.to_dict(),
            "created": session.created,
            "updated": session.updated,
            "leaf_id": session.leaf_id,
        },
        "messages": [_message_dict(m) for m in store.all_messages(session_id)],
    }


def _fits(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if origin is Literal:
        return any(value == arg and type(value) is type(arg) for arg in get_args(hint))
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64
    if hint is float:
        return _fits(value, int) or (isinstance(value, float) and math.isfinite(value))
    if hint is str:
        return isinstance(value, str)
    if hint in (dict, list):
        return isinstance(value, hint)
    return False


def _field(data: dict[str, Any], key: str, hint: Any, where: str, default: Any = ...) -> Any:
    if key not in data:
        if default is ...:
            raise StoreError(f"Not an importable session: {where} has no {key!r}.")
        return default
    if not _fits(data[key], hint):
        raise StoreError(
            f"Not an importable session: {where}.{key} is {data[key]!r:.40}, of the wrong type."
        )
    return data[key]


def _checked(cls: type, data: Any, where: str) -> Any:
    """A GenerationSettings, TurnStats or Source from ``data``, every known field type-checked."""
    if not isinstance(data, dict):
        raise StoreError(f"Not an importable session: {where} is not an object.")
    hints = get_type_hints(cls)
    known = {key: _field(data, key, hints[key], where) for key in data if key in hints}
    return cls(**known)


def _sources(rows: list[Any] | None, where: str) -> list[Source] | None:
    if not rows:
        return None
    found = []
    for n, row in enumerate(rows):
        try:
            found.append(_checked(Source, row, f"{where}.sources[{n}]"))
        except TypeError:
            raise StoreError(f"Not an importable session: {where}.sources[{n}] lacks a "
                             "field.") from None
    return found


def _ordered(messages: list[Message]) -> list[Message]:
    """Parents before children; a dangling parent or a cycle is an error."""
    by_id = {m.id: m for m in messages}
    placed: set[int | None] = {None}
    out: list[Message] = []
    for message in messages:
        chain: list[Message] = []
        seen: set[int | None] = set()
        node: Message | None = message
        while node is not None and node.id not in placed:
            if node.id in seen:
                raise StoreError(
                    f"Not an importable session: message {node.id} is its own ancestor."
                )
            seen.add(node.id)
            chain.append(node)
            if node.parent_id is not None and node.parent_id not in by_id:
                raise StoreError(
                    f"Not an importable session: message {node.id} has a missing parent "
                    f"{node.parent_id}."
                )
            node = by_id.get(node.parent_id) if node.parent_id is not None else None
        for item in reversed(chain):
            placed.add(item.id)
            out.append(item)
    return out


def _pins(rows: list[Any]) -> list[Pin]:
    """Pinned documents of an export; their KV prefix is computed again here."""
    pins = []
    for index, row in enumerate(rows):
        where = f"session.pins[{index}]"
        if not isinstance(row, dict):
            raise StoreError(f"Not an importable session: {where} is not an object.")
        pins.append(Pin(name=_field(row, "name", str, where), path=_field(row, "path", str, where),
                        text=_field(row, "text", str, where),
                        tokens=_field(row, "tokens", int, where, 0)))
    if len({p.name for p in pins}) != len(pins):
        raise StoreError("Not an importable session: two pinned documents share a name.")
    return pins


def parse_document(data: Any) -> tuple[Session, list[Message]]:
    """Validate an exported session; return it and its messages, parents first (source ids)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise StoreError("Not an mlxchat session export (no 'format': 'mlxchat-session').")
    version = data.get("version")
    if not isinstance(version, int) or not _fits(version, int) or version < 1:
        raise StoreError(f"Not an importable session: unknown format version {version!r:.20}.")
    if version > FORMAT_VERSION:
        raise StoreError(
            f"This export was made by a newer mlxchat (format version {version}; "
            f"this one reads {FORMAT_VERSION}); upgrade mlxchat to import it."
        )
    raw = _field(data, "session", dict, "the file")
    session = Session(
        title=_field(raw, "title", str, "session"),
        model=_field(raw, "model", str, "session"),
        system_prompt=_field(raw, "system_prompt", str | None, "session", None),
        settings=_checked(
            GenerationSettings, _field(raw, "settings", dict, "session", {}), "session.settings"
        ),
        leaf_id=_field(raw, "leaf_id", int | None, "session", None),
        created=_field(raw, "created", float | None, "session", None),
        title_locked=_field(raw, "title_locked", bool, "session", False),
        pins=_pins(_field(raw, "pins", list, "session", [])),
    )
    try:
        session.settings.check()  # the rule table /set, ask flags and the config use
    except ValueError as exc:
        raise StoreError(f"Not an importable session: session.settings: {exc}.") from None
    rows = data.get("messages")
    if not isinstance(rows, list):
        raise StoreError("Not an importable session: 'messages' is missing or not a list.")
    messages: list[Message] = []
    for index, row in enumerate(rows):
        where = f"messages[{index}]"
        if not isinstance(row, dict):
            raise StoreError(f"Not an importable session: {where} is not an object.")
        role = _field(row, "role", str, where)
        if role not in ROLES:
            raise StoreError(f"Not an importable session: {where}.role is {role!r:.20}.")
        stats = _field(row, "stats", dict | None, where, None)
        messages.append(
            Message(
                role=role,
                content=_field(row, "content", str, where),
                id=_field(row, "id", int, where),
                parent_id=_field(row, "parent_id", int | None, where),
                token_count=_field(row, "token_count", int | None, where, None),
                stats=None if stats is None else _checked(TurnStats, stats, f"{where}.stats"),
                cancelled=_field(row, "cancelled", bool, where, False),
                created=_field(row, "created", float | None, where, None),
                reasoning=_field(row, "reasoning", str | None, where, None),
                sources=_sources(_field(row, "sources", list | None, where, None), where),
                tool_calls=calls_from_json(json.dumps(_field(row, "tool_calls", list, where,
                                                             []))),
                tool_call_id=_field(row, "tool_call_id", str | None, where, None),
                tool_name=_field(row, "tool_name", str | None, where, None),
            )
        )
    for index, message in enumerate(messages):
        if message.role == "system" and message.parent_id is not None:
            raise StoreError(
                f"Not an importable session: messages[{index}] is a system message inside the "
                "conversation; the system prompt belongs in session.system_prompt."
            )
    ids = [m.id for m in messages]
    if len(set(ids)) != len(ids):
        raise StoreError("Not an importable session: two messages share an id.")
    if session.leaf_id is not None and session.leaf_id not in set(ids):
        raise StoreError(
            f"Not an importable session: the current message {session.leaf_id} is not in the file."
        )
    return session, _ordered(messages)


def import_json(store: SessionStore, source: Path | str | bytes) -> Session:
    """Import a JSON export (a file path, or the JSON text) as a new session."""
    if isinstance(source, Path):
        label = source.name
        try:
            text: str | bytes = read_limited(source, IMPORT_LIMIT_BYTES)
        except FileRefused as exc:
            raise StoreError(str(exc)) from None
    else:
        label, text = "The import", source
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreError(f"{label} is not JSON ({' '.join(str(exc).split())}).") from exc
    except RecursionError as exc:
        raise StoreError(f"{label} is nested too deeply to be a session export.") from exc
    session, messages = parse_document(data)
    return store.branches.import_tree(session, messages)


# -- files ---------------------------------------------------------------------


def safe_filename(title: str, fallback: str = "session") -> str:
    """A file name (no extension) made from a title: no separators, no leading dots, short."""
    title = title.encode("utf-8", "replace").decode("utf-8")
    kept = "".join(ch if ch.isalnum() or ch in " -_" else "-" for ch in title)
    words = "-".join(part for part in kept.split("-") if part.strip())
    name = " ".join(words.split()).strip(" -_")
    while len(name.encode("utf-8")) > FILENAME_BYTES:
        name = name[:-1]
    return name.rstrip(" -_") or fallback


def render_session(store: SessionStore, session_id: int, fmt: ExportFormat) -> str:
    """The export as text, for printing or writing."""
    if fmt == "md":
        return session_markdown(store.get_session(session_id))
    if fmt == "json":
        return json.dumps(session_document(store, session_id), ensure_ascii=False, indent=1) + "\n"
    raise StoreError(f"Unknown export format {fmt!r}; use one of {', '.join(FORMATS)}.")


def export_target(dest: Path | str | None, base_dir: Path, default_name: str, ext: str) -> Path:
    """Where an export goes: ``dest`` is a file or folder name under ``base_dir``.

    Refuses (StoreError) anything that resolves outside ``base_dir``: ``..``,
    an absolute path elsewhere, or a symlink that points out.
    """
    try:
        base = base_dir.expanduser().resolve()
        if dest is None or str(dest) == "":
            target = base / default_name
        else:
            raw = str(dest)
            given = Path(raw).expanduser()
            target = given if given.is_absolute() else base / given
            if raw.endswith(("/", os.sep)) or target.is_dir():
                target = target / default_name
            elif not target.suffix:
                target = target.with_name(f"{target.name}.{ext}")
        resolved = target.resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        raise StoreError(f"Cannot export to {str(dest)!r:.80}: {exc}.") from exc
    if resolved == base or not resolved.is_relative_to(base):
        raise StoreError(f"Refusing to export to {str(dest)!r:.80}: it is outside {base}.")
    return resolved


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file + rename), readable by the owner only."""
    try:
        write_private_text(path, text)
    except OSError as exc:
        raise StoreError(f"Cannot write {path}: {exc.strerror or exc}.") from exc


def export_session(
    store: SessionStore,
    session_id: int,
    fmt: ExportFormat,
    dest: Path | str | None = None,
    *,
    base_dir: Path | None = None,
) -> Path:
    """Write the session as ``fmt`` and return the file's path.

    ``dest`` is a file or folder, relative to ``base_dir`` (default: the current
    folder); without it the name is the sanitised title plus the session id.
    A file of the same name is replaced.
    """
    if fmt not in FORMATS:
        raise StoreError(f"Unknown export format {fmt!r}; use one of {', '.join(FORMATS)}.")
    session = store.get_session(session_id)
    default_name = f"{safe_filename(session.title)}-{session_id}.{fmt}"
    path = export_target(dest, base_dir if base_dir is not None else Path.cwd(), default_name, fmt)
    write_private(path, render_session(store, session_id, fmt))
    return path
