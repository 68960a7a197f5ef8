"""Export a session to Markdown (readable) or JSON (lossless).

Markdown holds the current branch. JSON holds everything: every branch, message
ids and parents, stats, settings (``importing.import_json`` makes a new session
from it with new ids). Files are written atomically (temp file + rename), mode
0600, where the user says, or in the exports folder.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from mlxchat import __version__, paths
from mlxchat.chat import Message, Session, calls_text, quoted, tool_label
from mlxchat.files import write_private_text
from mlxchat.generation import setting_words
from mlxchat.sources import Source, cite, without_sources
from mlxchat.store.errors import StoreError
from mlxchat.store.image_files import export_images
from mlxchat.store.rows import calls_to_json
from mlxchat.store.sessions import SessionStore
from mlxchat.turn_stats import TurnStats
from mlxchat.units import fmt_tps

ExportFormat = Literal["md", "json"]
FORMATS: tuple[str, ...] = ("md", "json")
FORMAT_NAME = "mlxchat-session"
FORMAT_VERSION = 1
FILENAME_BYTES = 100


# -- Markdown ------------------------------------------------------------------


STOPPED = "stopped"
"""A reply stopped before its end: the chat's "(stopped)", the export's word too."""


def markdown_stats_line(stats: TurnStats, cancelled: bool = False) -> str:
    """Under a reply in the Markdown export (plain figures, unlike the transcript's):
    '_ttft 0.12 s · 45.1 tok/s · 132 tokens · reused 1200/1250 · warm_'."""
    parts = [stats.model + (f" ({stats.model_quantization})" if stats.model_quantization
                            else "")] if stats.model else []
    first = stats.first_token_s  # none for a turn stopped before its first token
    parts += [
        *([] if first is None else [f"ttft {first:.2f} s"]),
        fmt_tps(stats.decode_tps),
        f"{stats.generated_tokens} token" + ("" if stats.generated_tokens == 1 else "s")
        + (f" ({stats.reasoning_tokens} thinking)" if stats.reasoning_tokens else ""),
    ]
    if stats.prompt_tokens:
        parts.append(f"reused {stats.reused_tokens}/{stats.prompt_tokens}")
    parts.append(stats.cache_source)
    if stats.kv_bits:
        parts.append(f"kv {stats.kv_bits}-bit")
    if cancelled or stats.finish_reason != "stop":  # the chat's word for a stop: "stopped"
        parts.append(STOPPED if cancelled or stats.finish_reason == "cancelled"
                     else "window full" if stats.window_full else stats.finish_reason)
    return "_" + " · ".join(parts) + "_"


def _when(timestamp: float | None) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else "?"


def session_markdown(session: Session) -> str:
    """The session's header and its current branch as Markdown."""
    settings = " · ".join(f"{k} {setting_words(k, v)}"
                          for k, v in session.settings.to_dict().items())
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
        if message.role == "summary":  # the messages above stay; the model saw this instead
            headline = message.compaction.headline() if message.compaction else "summary"
            out += ["", f"### Summary ({headline})", "", quoted(message.content)]
            continue
        if message.role == "tool":  # a quoted block under its tool's name
            out += ["", f"### {tool_label(message).capitalize()}"]
            if message.tool_run is not None:
                out += ["", f"_{message.tool_run.header()}_"]
            out += ["", quoted(message.content)]
            continue
        out += ["", f"### {message.role.capitalize()}"]
        if message.reasoning:
            out += ["", "#### Thinking", "", quoted(message.reasoning)]
            out += ["", "#### Answer"]
        if message.role == "user":
            sources = message.sources
            text = without_sources(message.content) if sources else message.content
            for image in message.images:  # the kept file, by its hash
                out += ["", f"![{image.name or image.digest[:12]}]({Path(image.path).as_uri()})"]
            out += ["", text.rstrip()] + _sources_markdown(sources)
        else:
            out += ["", cite(message.content, sources).rstrip()]
        if message.tool_calls:
            out += ["", "#### Tool calls", "", calls_text(message.tool_calls)]
        if message.stats is not None:
            out += ["", markdown_stats_line(message.stats, message.cancelled)]
        elif message.cancelled:
            out += ["", f"_{STOPPED}_"]
    return "\n".join(out) + "\n"


def _sources_markdown(sources: list[Source] | None) -> list[str]:
    """What a message retrieved: each source's line and its text as sent, quoted."""
    if not sources:
        return []
    out = ["", f"#### Sources ({sources[0].collection}, {sum(s.tokens for s in sources):,} "
           "tokens)"]
    best = max(s.score for s in sources)
    for s in sources:  # relevance in words, as the app shows it (a bare 0.0328 means nothing)
        out += ["", s.describe(best=best), "", quoted(s.text.strip())]
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
        **({"tool_run": message.tool_run.to_dict()} if message.tool_run is not None else {}),
        **({"images": export_images(message.images)} if message.images else {}),
        **({"compaction": message.compaction.to_dict()} if message.compaction else {}),
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


def safe_filename(title: str, fallback: str = "session") -> str:
    """A file name (no extension) made from a title: one plain component with
    no separators, spaces, leading dots or dashes, at most FILENAME_BYTES."""
    title = title.encode("utf-8", "replace").decode("utf-8")
    kept = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in title)
    name = "-".join(part for part in kept.split("-") if part).strip("-_")
    while len(name.encode("utf-8")) > FILENAME_BYTES:
        name = name[:-1]
    return name.rstrip("-_") or fallback


def render_session(store: SessionStore, session_id: int, fmt: ExportFormat) -> str:
    """The export as text, for printing or writing."""
    if fmt == "md":
        return session_markdown(store.get_session(session_id))
    if fmt == "json":
        return json.dumps(session_document(store, session_id), ensure_ascii=False, indent=1) + "\n"
    raise StoreError(f"Unknown export format {fmt!r}; use one of {', '.join(FORMATS)}.")


def export_target(dest: Path | str | None, *, cwd: Path, folder: Path, default_name: str,
                  ext: str) -> Path:
    """Where an export goes. Without ``dest``: ``default_name`` in ``folder`` (the
    exports folder, created readable by the owner only). With it: the place the
    user named, relative to ``cwd``: a folder (one that exists, or a name ending
    in a separator) gets the default name inside, a file name without a suffix
    gets ``.ext``. The user's folders are neither made nor changed: a missing
    one is a StoreError, one line."""
    if dest is None or str(dest) == "":
        try:
            return paths.ensure_private_dir(folder) / default_name
        except OSError as exc:
            raise StoreError(f"Cannot create {folder}: {exc.strerror or exc}.") from None
    raw = str(dest)
    if "\x00" in raw:
        raise StoreError("An export path cannot hold a NUL character.")
    target = Path(raw).expanduser()
    target = target if target.is_absolute() else cwd / target
    try:
        named_folder = raw.endswith(("/", os.sep)) or target.is_dir()
        if not named_folder and not target.suffix:
            target = target.with_name(f"{target.name}.{ext}")
        where = target if named_folder else target.parent
        if not where.is_dir():
            problem = "is not a folder" if where.exists() else "does not exist: make it first"
            raise StoreError(f"Cannot export to {raw!r:.80}: {str(where)!r:.80} {problem}.")
    except OSError as exc:  # a name too long, a folder that cannot be looked into
        raise StoreError(f"Cannot export to {raw!r:.80}: {exc.strerror or exc}.") from None
    return target / default_name if named_folder else target


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
    cwd: Path | None = None,
    folder: Path | None = None,
) -> Path:
    """Write the session as ``fmt`` and return the file's path.

    ``dest`` is the file or folder the user named, relative to ``cwd`` (default:
    the current folder); without it the file goes in ``folder`` (default:
    ``paths.exports_dir()``), named after the title and the session id. A file
    of the same name is replaced.
    """
    if fmt not in FORMATS:
        raise StoreError(f"Unknown export format {fmt!r}; use one of {', '.join(FORMATS)}.")
    session = store.get_session(session_id)
    default_name = f"{safe_filename(session.title)}-{session_id}.{fmt}"
    path = export_target(dest, cwd=cwd or Path.cwd(), folder=folder or paths.exports_dir(),
                         default_name=default_name, ext=fmt)
    write_private(path, render_session(store, session_id, fmt))
    return path
