"""Row mapping and the statements several tables share: plain functions over a
cursor, so that one transaction can span the tables of a change."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from array import array
from typing import Any

from mlxchat.chat import CalledTool, Message, Session, ToolRun, typed_text
from mlxchat.generation import GENERATION_RULES, GenerationSettings, generation_problem
from mlxchat.sources import Source, without_sources
from mlxchat.store.errors import StoreError
from mlxchat.store.image_files import images_from_json, images_to_json
from mlxchat.store.pin_rows import read_pins, write_pins
from mlxchat.store.summary_rows import compaction_from_json, compaction_to_json
from mlxchat.turn_stats import TurnStats

ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool", "summary")
DEFAULT_TITLE = "New chat"
TITLE_LENGTH = 60


def title_from(text: str, limit: int = TITLE_LENGTH) -> str:
    """First non-blank line of ``text`` (attached files skipped: ``chat.typed_text``),
    whitespace collapsed, cut at a word to ``limit``."""
    text = typed_text(without_sources(text)).encode("utf-8", "replace").decode("utf-8")
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join("".join(ch if ch.isprintable() else " " for ch in line).split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" .,;:-") + "…"


def sources_from_json(text: str | None) -> list[Source] | None:
    """A message's stored sources; unreadable ones (a hand edit) read as none."""
    if not text:
        return None
    try:
        return [Source.from_dict(item) for item in json.loads(text)]
    except (ValueError, TypeError, AttributeError):
        return None


def sources_to_json(sources: list[Source] | None) -> str | None:
    return json.dumps([s.to_dict() for s in sources]) if sources else None


def message_from_row(row: sqlite3.Row) -> Message:
    stats = None
    if row["stats"]:
        try:
            stats = TurnStats.from_dict(json.loads(row["stats"]))
        except (ValueError, TypeError):
            stats = None
    return Message(
        role=row["role"],
        content=row["content"],
        id=row["id"],
        parent_id=row["parent_id"],
        token_count=row["token_count"],
        stats=stats,
        cancelled=bool(row["cancelled"]),
        created=row["created"],
        token_ids=ids_from_blob(row["token_ids"]),
        ledger_key=row["ledger_key"],
        ledger_start=bool(row["ledger_start"]),
        reasoning=row["reasoning"],
        sources=sources_from_json(row["sources"]),
        tool_calls=calls_from_json(row["tool_calls"]),
        tool_call_id=row["tool_call_id"],
        tool_name=row["tool_name"],
        tool_run=tool_run_from_json(row["tool_run"]),
        images=images_from_json(row["images"]),
        compaction=compaction_from_json(row["compaction"]),
    )


def tool_run_from_json(text: str | None) -> ToolRun | None:
    """A result's stored run; an unreadable one (a hand edit) reads as none."""
    try:
        data = json.loads(text) if text else None
        return ToolRun.from_dict(data) if isinstance(data, dict) else None
    except (ValueError, TypeError):
        return None


def calls_to_json(calls: tuple[CalledTool, ...] | list[CalledTool]) -> str | None:
    if not calls:
        return None
    return json.dumps([{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
                      ensure_ascii=False)


def calls_from_json(text: str | None) -> tuple[CalledTool, ...]:
    """Stored calls; a row a hand edit broke reads as none."""
    try:
        items = json.loads(text) if text else []
        return tuple(CalledTool(str(c["name"]), c.get("arguments"), str(c.get("id") or ""))
                     for c in items)
    except (ValueError, TypeError, KeyError, AttributeError):
        return ()


def ids_to_blob(ids: list[int] | None) -> bytes | None:
    """Token ids as little-endian int32 (4 bytes a token)."""
    if ids is None:
        return None
    arr = array("i", ids)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def ids_from_blob(blob: bytes | None) -> list[int] | None:
    if blob is None or len(blob) % 4:
        return None
    arr = array("i")
    arr.frombytes(blob)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tolist()


def settings_from_json(text: str | None) -> GenerationSettings:
    """Stored settings; a value the rule table refuses (an import from before it
    was checked, a hand edit) falls back to its default, so the session stays usable."""
    try:
        settings = GenerationSettings.from_dict(json.loads(text or "{}"))
    except (ValueError, TypeError):
        return GenerationSettings()
    default = GenerationSettings()
    for name in GENERATION_RULES:
        if generation_problem(name, getattr(settings, name)):
            setattr(settings, name, getattr(default, name))
    return settings


PATH_UP = """
    WITH RECURSIVE path(id, depth) AS (
        SELECT id, 0 FROM messages WHERE id = ?
        UNION ALL
        SELECT m.parent_id, path.depth + 1 FROM messages AS m JOIN path ON m.id = path.id
        WHERE m.parent_id IS NOT NULL
    )
"""


# Up from a message, stopping at the first user message: a step per message
# walked, so a reply in a long chain looks only as far as the turn's question.
_USER_AT_OR_ABOVE = """
    WITH RECURSIVE up(parent_id, role) AS (
        SELECT parent_id, role FROM messages WHERE id = ?
        UNION ALL
        SELECT m.parent_id, m.role FROM messages AS m JOIN up ON m.id = up.parent_id
        WHERE up.role <> 'user'
    )
    SELECT EXISTS (SELECT 1 FROM up WHERE role = 'user')
"""


def user_at_or_above(cur: sqlite3.Cursor, message_id: int) -> bool:
    """Whether ``message_id`` or one of its ancestors is a user message."""
    return bool(cur.execute(_USER_AT_OR_ABOVE, (message_id,)).fetchone()[0])


def session_row(cur: sqlite3.Cursor, session_id: int) -> sqlite3.Row:
    row: sqlite3.Row | None = cur.execute(
        "SELECT * FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    if row is None:
        raise StoreError(f"There is no session #{session_id}.")
    return row


def check_message(cur: sqlite3.Cursor, session_id: int, message_id: int) -> None:
    row = cur.execute("SELECT session_id FROM messages WHERE id = ?", (message_id,)).fetchone()
    if row is None or row[0] != session_id:
        raise StoreError(f"Message {message_id} is not part of session #{session_id}.")


def path_to(cur: sqlite3.Cursor, leaf_id: int | None) -> list[Message]:
    """The messages from the root down to ``leaf_id``, root first."""
    if leaf_id is None:
        return []
    sql = PATH_UP + "SELECT m.* FROM path JOIN messages AS m USING (id) ORDER BY path.depth DESC"
    return [message_from_row(row) for row in cur.execute(sql, (leaf_id,))]


def read_session(cur: sqlite3.Cursor, session_id: int) -> Session:
    """The session with its current branch and pins."""
    row = session_row(cur, session_id)
    return Session(
        id=row["id"],
        title=row["title"],
        model=row["model"],
        system_prompt=row["system_prompt"],
        settings=settings_from_json(row["settings"]),
        messages=path_to(cur, row["leaf_id"]),
        leaf_id=row["leaf_id"],
        created=row["created"],
        updated=row["updated"],
        title_locked=bool(row["title_locked"]),
        pins=read_pins(cur, session_id),
    )


def insert_message(
    cur: sqlite3.Cursor, session_id: int, parent_id: int | None, message: Message
) -> int:
    if message.role not in ROLES:
        raise StoreError(
            f"Unknown message role {message.role!r}; expected one of {', '.join(ROLES)}."
        )
    stats = json.dumps(message.stats.to_dict()) if message.stats is not None else None
    cur.execute(
        "INSERT INTO messages (session_id, parent_id, role, content, token_count, stats,"
        " cancelled, created, token_ids, ledger_key, ledger_start, reasoning, sources,"
        " tool_calls, tool_call_id, tool_name, tool_run, images, compaction)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session_id,
            parent_id,
            message.role,
            message.content,
            message.token_count,
            stats,
            int(message.cancelled),
            message.created if message.created is not None else time.time(),
            ids_to_blob(message.token_ids),
            message.ledger_key,
            int(message.ledger_start),
            message.reasoning or None,
            sources_to_json(message.sources),
            calls_to_json(message.tool_calls),
            message.tool_call_id,
            message.tool_name,
            json.dumps(message.tool_run.to_dict()) if message.tool_run is not None else None,
            images_to_json(message.images),
            compaction_to_json(message.compaction),
        ),
    )
    assert cur.lastrowid is not None
    return cur.lastrowid


def free_title(cur: sqlite3.Cursor, title: str, session_id: int | None = None) -> str:
    """``title``, or 'title (2)', 'title (3)'... when another session has it (so a
    title names one session: ``ask --session TITLE`` and ``/open`` find it)."""
    taken = {row[0] for row in cur.execute(
        "SELECT title FROM sessions WHERE (title = ? OR title LIKE ? ESCAPE '\\')"
        " AND id IS NOT ?", (title, _like_prefix(title) + " (%)", session_id))}
    if title not in taken or title == DEFAULT_TITLE:
        return title
    n = 2
    while f"{title} ({n})" in taken:
        n += 1
    return f"{title} ({n})"


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def insert_session(cur: sqlite3.Cursor, session: Session) -> int:
    """A new sessions row (and its pins) from ``session``'s metadata; its id."""
    now = time.time()
    cur.execute(
        "INSERT INTO sessions (title, title_locked, model, system_prompt, settings, created,"
        " updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            title_from(session.title, 200) or DEFAULT_TITLE,
            int(session.title_locked),
            session.model,
            session.system_prompt,
            json.dumps(session.settings.to_dict()),
            session.created if session.created is not None else now,
            session.updated if session.updated is not None else now,
        ),
    )
    session_id = cur.lastrowid
    assert session_id is not None
    write_pins(cur, session_id, session.pins)  # a fork pins what its source did
    return session_id


def new_session_record(title: str, model: str, system_prompt: str | None,
                 settings: GenerationSettings | None) -> Session:
    """An empty session to insert: a given title is locked, else the first
    user message sets it."""
    clean = title_from(title, 200)
    return Session(title=clean or DEFAULT_TITLE, model=model, system_prompt=system_prompt,
                   settings=settings or GenerationSettings(), title_locked=bool(clean))


def stats_dict(text: str | None) -> dict[str, Any]:
    """Stored figures as a dict; unreadable ones (as other readers take them) none."""
    try:
        stats = json.loads(text) if text else {}
    except ValueError:
        return {}
    return stats if isinstance(stats, dict) else {}
