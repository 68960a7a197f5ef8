"""Plain data shared by the engine, the store, the commands and the UI (stdlib only):
messages, sessions, pinned documents and attachments, and how they are shown."""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Sequence

from mlxchat.generation import GenerationSettings
from mlxchat.record import Record
from mlxchat.turn_stats import TurnStats

if TYPE_CHECKING:
    from mlxchat.sources import Source

Role = Literal["system", "user", "assistant", "tool", "summary"]

NO_SYSTEM_ROLE = ("this model's chat template has no system role: the system prompt goes at "
                  "the start of the first message")
"""The one-line notice for templates that refuse a system message (Gemma 2)."""


@dataclass(frozen=True)
class CalledTool:
    """A tool call a reply made: the tool's name, its arguments (JSON data:
    an object, or the text the model wrote when it was not JSON) and its id."""

    name: str
    arguments: Any
    id: str = ""


@dataclass(frozen=True)
class ToolRun(Record):
    """How a tool result came to be: which server's tool gave it, how long it
    took, how much it sent (shown folded over the result, and exported)."""

    server: str
    tool: str
    """The tool's name on its server (the result's ``tool_name`` is the model's)."""
    duration_s: float = 0.0
    result_bytes: int = 0
    note: str = ""
    """One line: denied and why, an error, a timeout, a cut to the token budget."""

    def header(self) -> str:
        """'server.tool · 0.4 s · 1.2 KB · note'."""
        parts = [f"{self.server}.{self.tool}", f"{self.duration_s:.1f} s",
                 human_bytes(self.result_bytes)]
        return " · ".join(parts + ([self.note] if self.note else []))


def quoted(text: str) -> str:
    """``text`` as a Markdown quote, line by line."""
    return "\n".join("> " + line if line else ">" for line in text.splitlines() or [""])


def tool_label(message: "Message") -> str:
    """What a tool result is shown under: the tool it came from."""
    return f"tool result · {message.tool_name or 'unnamed tool'}"


def calls_text(calls: Sequence[CalledTool]) -> str:
    """A reply's tool calls, one line each: the name and the arguments."""
    def args(call: CalledTool) -> str:
        if isinstance(call.arguments, str):
            return call.arguments
        return json.dumps(call.arguments, ensure_ascii=False)

    return "\n".join(f"→ {call.name}({args(call)})" for call in calls)


@dataclass(frozen=True)
class Compaction(Record):
    """What a summary message (role ``summary``) stands for. It is stored
    after the last message it was made on; the model then sees the session's
    system part, the summary in front of the first message kept, and every
    message from there on (earlier summaries left out). Nothing is deleted:
    the messages it summarized stay in the store and on the branch."""

    kept: int
    """Messages right above the summary on its branch that the model still
    sees in full (the first of them a user message)."""
    summarized: int = 0
    """Messages of the conversation the summary stands for (those an earlier
    summary stood for included)."""
    summary_tokens: int = 0
    """What the summary's text costs in the model's tokens."""
    trigger: str = "auto"
    """'auto' (the window filled), 'manual' (/compact) or 'api' (a client's request)."""
    tokens_before: int = 0
    """Tokens the conversation held in the window before it was compacted..."""
    tokens_after: int = 0
    """...and after (the system part, the summary, the messages kept)."""
    prepared_s: float = 0.0
    """Seconds of engine time its summary and prefill took (in idle time when auto)."""

    def headline(self) -> str:
        """'42 messages summarized in 380 tokens'."""
        noun = "message" if self.summarized == 1 else "messages"
        return f"{self.summarized:,} {noun} summarized in {self.summary_tokens:,} tokens"


SUMMARY_OPEN = "<summary of the earlier conversation>"
SUMMARY_CLOSE = "</summary of the earlier conversation>"


def summary_block(summary: str) -> str:
    """How a summary goes in front of the first message the model still sees."""
    return f"{SUMMARY_OPEN}\n{summary.strip()}\n{SUMMARY_CLOSE}"


def latest_summary(branch: Sequence["Message"]) -> int | None:
    """Index of the newest usable summary message on ``branch`` (None: none)."""
    for i in range(len(branch) - 1, -1, -1):
        m = branch[i]
        if m.role == "summary":
            first = i - (m.compaction.kept if m.compaction else 0)
            if m.compaction and 0 <= first < i and branch[first].role == "user":
                return i
    return None


def model_view(branch: Sequence["Message"]) -> list["Message"]:
    """The messages of ``branch`` as the model sees them: after a compaction,
    the summary in front of the first message kept, the messages before it
    left out; summary messages themselves are never rendered."""
    at = latest_summary(branch)
    if at is None:
        return [m for m in branch if m.role != "summary"]
    marker = branch[at]
    first = at - marker.compaction.kept  # type: ignore[union-attr]
    head = replace(branch[first],
                   content=summary_block(marker.content) + "\n\n" + branch[first].content)
    return [head] + [m for m in branch[first + 1:] if m.role != "summary"]


@dataclass(frozen=True)
class ImageRef:
    """An image a message carries, stored once by the hash of its bytes."""

    digest: str
    """sha256 of the file's bytes (hex): the image's identity everywhere."""
    path: str
    """Where its bytes are (the image store's file, or the file given)."""
    name: str = ""
    """The file name it was given as, for labels."""
    width: int = 0
    height: int = 0


@dataclass
class Message:
    """One message of a conversation, as the engine and the store see it."""

    role: Role
    content: str
    id: int | None = None
    """Row id in the session store; None until stored."""
    parent_id: int | None = None
    """The message this one answers or follows; edits and retries branch here."""
    token_count: int | None = None
    """Tokens of this message in the rendered prompt, when measured."""
    stats: TurnStats | None = None
    """For an assistant reply: the measured figures of the turn that produced it."""
    cancelled: bool = False
    """An assistant reply stopped by the user: the text is what was shown."""
    created: float | None = None
    """Unix time the message was stored."""
    token_ids: list[int] | None = None
    """What this message added to the conversation's token sequence (its token
    ledger): for a user message what the template rendered for it after the
    history, for a reply the tokens sampled. None when not recorded."""
    ledger_key: str | None = None
    """Identifies the template, model and system prompt ``token_ids`` were made with."""
    ledger_start: bool = False
    """``token_ids`` hold the whole prompt up to here: earlier ids are not used."""
    reasoning: str | None = None
    """For a reply of a reasoning model: its reasoning, apart from ``content``."""
    sources: "list[Source] | None" = None
    """For a user message sent with a collection in use: the chunks retrieved
    for it, as they are in ``content`` (never retrieved again)."""
    tool_calls: tuple[CalledTool, ...] = ()
    """For a reply: the tools it called (``content`` is the text around the calls)."""
    tool_call_id: str | None = None
    """For a tool result (role ``tool``): the id of the call it answers."""
    tool_name: str | None = None
    """For a tool result: the name of the tool that gave it."""
    tool_run: ToolRun | None = None
    """For a result of a tool the app ran: where it came from and what it cost."""
    images: tuple[ImageRef, ...] = ()
    """For a user message: the images it shows the model, before its text."""
    compaction: Compaction | None = None
    """For a summary message (role ``summary``): what it stands for."""



@dataclass(frozen=True)
class Pin:
    """A document pinned into a session right after its system prompt."""

    name: str
    path: str
    """Where it was read from (shown only; the text below is what the model sees)."""
    text: str
    tokens: int = 0
    """What it adds to the prompt, counted when it was pinned."""
    prefix_key: str | None = None
    """The shared KV prefix of the session's system part (same on all its pins)."""

    @property
    def text_hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()


def pinned_block(name: str, text: str) -> str:
    """How a pinned document goes into the system part."""
    return f'<document name="{name}">\n{text}\n</document>'


def pinned_system(system: str | None, pins: Sequence[Pin]) -> str | None:
    parts = ([system] if system else []) + [pinned_block(p.name, p.text) for p in pins]
    return "\n\n".join(parts) if parts else None


@dataclass
class Session:
    """A saved conversation: settings plus the messages of its current branch."""

    id: int | None = None
    title: str = "New chat"
    model: str = ""
    system_prompt: str | None = None
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    messages: list[Message] = field(default_factory=list)
    """The current branch, root first."""
    leaf_id: int | None = None
    created: float | None = None
    updated: float | None = None
    title_locked: bool = False
    """True once the user renamed it; titles no longer follow the first message."""
    pins: list[Pin] = field(default_factory=list)
    """Documents pinned after the system prompt, in order (``/pin``)."""

    @property
    def context_system(self) -> str | None:
        """What the model gets as its system part: the system prompt, then each
        pinned document (the exact token prefix pinned sessions share)."""
        return pinned_system(self.system_prompt, self.pins)


def human_bytes(n: int | float) -> str:
    """1536 -> '1.5 KB' (decimal units, as memory gauges show)."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


@dataclass
class SessionSummary:
    """One row of the sessions browser / ``mlxchat sessions list``."""

    id: int
    title: str
    model: str
    created: float
    updated: float
    message_count: int = 0
    snapshot_bytes: int = 0
    """Size of the session's KV snapshot file on disk, 0 if none."""
    snippet: str = ""
    """For a search result: the matching text with the match in [brackets]."""
    pins: int = 0
    """Documents pinned to it."""
    from_api: bool = False
    """Started or used by a client of ``mlxchat serve``."""


def relative_time(ts: float, now: float | None = None) -> str:
    """A past Unix time as 'just now', '5 min ago', '3 h ago', 'yesterday', '4 days ago'
    or a date; ``now`` is injectable so tests and snapshots are stable."""
    now = time.time() if now is None else now
    delta = now - ts
    if delta < 60:
        return "just now"
    if delta < 3600:
        return f"{int(delta // 60)} min ago"
    if delta < 86400:
        return f"{int(delta // 3600)} h ago"
    if delta < 2 * 86400:
        return "yesterday"
    if delta < 7 * 86400:
        return f"{int(delta // 86400)} days ago"
    return time.strftime("%Y-%m-%d", time.localtime(ts))


_ATTACHMENT = re.compile(r'\s*<file name="([^"\n]*)">\n(.*?)\n</file>', re.S)


def attachment_block(name: str, text: str) -> str:
    """How an attached file goes into a user message."""
    return f'<file name="{name}">\n{text}\n</file>'


@dataclass
class Attachment:
    """A text file waiting to go into the next message."""

    path: Path
    text: str
    tokens: int

    @property
    def block(self) -> str:
        return attachment_block(self.path.name, self.text)


def split_attachments(content: str) -> tuple[list[tuple[str, str]], str]:
    """A user message's attached files in front ((name, text) each) and the rest."""
    files, rest = [], content
    while (found := _ATTACHMENT.match(rest)) is not None:
        files.append((found.group(1), found.group(2)))
        rest = rest[found.end():]
    return files, rest


def typed_text(content: str) -> str:
    """A user message without the attached files in front: what was typed, or
    the files' names when nothing was (for titles and previews)."""
    files, rest = split_attachments(content)
    if not files:
        return content
    return rest if rest.strip() else ", ".join(name for name, _ in files)
