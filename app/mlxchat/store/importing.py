"""Import a JSON export (``export.session_document``'s shape) as a new session
with new ids: every field checked against its type before anything is stored,
the file read with a size limit, one line for what is wrong."""

from __future__ import annotations

import json
import math
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from mlxchat.chat import Compaction, Message, Pin, Session, ToolRun
from mlxchat.files import FileRefused, read_limited
from mlxchat.generation import GenerationSettings
from mlxchat.sources import Source
from mlxchat.store.errors import StoreError
from mlxchat.store.export import FORMAT_NAME, FORMAT_VERSION
from mlxchat.store.image_files import import_images, keep_imported
from mlxchat.store.rows import ROLES, calls_from_json
from mlxchat.store.sessions import SessionStore
from mlxchat.turn_stats import TurnStats

IMPORT_LIMIT_BYTES = 256 << 20
"""Largest file ``import_json`` reads; a session export is far smaller."""
_INT64 = 2**63


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
    if origin is list:  # list[str]: each item checked
        return isinstance(value, list) and all(_fits(v, get_args(hint)[0]) for v in value)
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


def _record(cls: type, row: dict | None, where: str) -> Any:
    if row is None:
        return None
    try:
        return _checked(cls, row, where)
    except TypeError:
        raise StoreError(f"Not an importable session: {where} lacks a field.") from None


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


def parse_document(data: Any, images: dict[str, bytes] | None = None
                   ) -> tuple[Session, list[Message]]:
    """Validate an exported session; return it and its messages, parents first
    (source ids). The bytes of its images go into ``images`` (by digest)."""
    images = {} if images is None else images
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
                tool_run=_record(ToolRun, _field(row, "tool_run", dict | None, where, None),
                                 f"{where}.tool_run"),
                compaction=_record(Compaction, _field(row, "compaction", dict | None, where, None),
                                   f"{where}.compaction"),
                images=import_images(_field(row, "images", list, where, []), where, images),
            )
        )
    # A system message inside the conversation is an API client's, stored where it
    # stood (the system prompt itself is session.system_prompt).
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
    images: dict[str, bytes] = {}
    session, messages = parse_document(data, images)
    keep_imported(images)  # only once the whole file passed
    return store.branches.import_tree(session, messages)


# -- files ---------------------------------------------------------------------
