"""The types every slash command shares: what a command is, what it gets, what it returns.

Stdlib only at import time; nothing here imports Textual or MLX.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mlxchat.errors import MlxchatError
from mlxchat.units import fmt_seconds, plural

if TYPE_CHECKING:
    from mlxchat.chat import ImageRef
    from mlxchat.engine.events import Event
    from mlxchat.models import ModelEntry
    from mlxchat.session.conversation import Conversation
    from mlxchat.turn_stats import TurnStats

ResultKind = Literal["info", "error", "markdown", "table", "confirm"]
Screen = Literal["sessions", "models", "help"]

ERROR_CHARS = 300


class CommandError(MlxchatError):
    """Bad input or a refused request; the message is one line for the user.
    ``more``: what to choose from (valid names), shown under that line, wrapped."""

    def __init__(self, message: str, *, more: str = "") -> None:
        super().__init__(message)
        self.more = more


def one_line(text: str, limit: int = ERROR_CHARS) -> str:
    """Whitespace (newlines included) collapsed and cut to ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass
class Confirmation:
    """A question to ask before something irreversible; ``accept()`` does it."""

    question: str
    accept: Callable[[], CommandResult]
    """Run after the user says yes; never raises (the registry guards it)."""
    yes: str = "Yes"
    """Label of the button that accepts, e.g. 'Delete'."""
    destructive: bool = True


@dataclass
class CommandResult:
    """What a command reports. A UI renders ``kind``/``text``/``rows`` generically,
    then acts on whichever action fields are set (several may be)."""

    kind: ResultKind = "info"
    """'info' and 'error': ``text`` is plain (an error is one line); 'markdown':
    ``text`` is Markdown; 'table': ``text`` is a caption over ``columns``/``rows``;
    'confirm': ``text`` is ``confirm.question``."""
    text: str = ""
    columns: tuple[str, ...] = ()
    rows: list[tuple[str, ...]] = field(default_factory=list)
    """Table cells, already formatted as text, one tuple per row."""
    turn: Iterator[Event] | None = None
    """A started turn (/retry, /edit): consume it exactly like ``conv.turns.send``."""
    confirm: Confirmation | None = None
    """Ask ``confirm.question``; on yes, render ``confirm.accept()``."""
    open_screen: Screen | None = None
    """Interactive UIs open this screen; the rows hold the same content for others."""
    quit: bool = False
    session_changed: bool = False
    """The session, its branch or its model changed: reload the transcript and gauges."""
    clear_input: bool = False
    prefill_input: str | None = None
    """Put this text into the input line for the user to edit and send."""
    more: str = ""
    """Under an error's one line: what to choose from (plain text, wrapped)."""
    image: ImageRef | None = None
    """An image the UI previews under ``text`` (/image), drawn as the transcript draws it."""

    @classmethod
    def info(cls, text: str, **actions: Any) -> CommandResult:
        return cls("info", text, **actions)

    @classmethod
    def error(cls, text: str, *, more: str = "") -> CommandResult:
        return cls("error", one_line(text), more=more)

    @classmethod
    def markdown(cls, text: str, **actions: Any) -> CommandResult:
        return cls("markdown", text, **actions)

    @classmethod
    def table(cls, caption: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
              **actions: Any) -> CommandResult:
        return cls("table", caption, tuple(columns),
                   [tuple(str(cell) for cell in row) for row in rows], **actions)

    @property
    def ok(self) -> bool:
        return self.kind != "error"

    def plain(self) -> str:
        """The result as plain text, for a terminal without a UI (and for tests)."""
        if self.kind != "table":
            return f"{self.text}\n{self.more}" if self.more else self.text
        widths = [len(c) for c in self.columns]
        for row in self.rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
        lines = [self.text] if self.text else []
        header = [self.columns] if any(self.columns) else []
        for row in [*header, *self.rows]:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        return "\n".join(lines)


@dataclass(frozen=True)
class Completion:
    """One completion of the input line, as the registry offers it and the prompt lists it."""

    value: str
    """The full replacement text of the input line, e.g. '/model llama3.2-3b'."""
    display: str
    """What the list shows, e.g. 'llama3.2-3b'."""
    help: str = ""
    """One line shown dimmed next to ``display``."""


def _default_cwd() -> Path:
    return Path.cwd()


def catalog_models() -> list[ModelEntry]:
    """Every catalog alias as a /models row (imports the models package on first use)."""
    from mlxchat.models import list_models

    return list_models()


@dataclass
class CommandContext:
    """What a command acts on: the conversation plus what the UI or CLI provides."""

    conversation: Conversation
    clipboard: Callable[[str], None] | None = None
    """Copies text through the terminal (Textual's OSC 52), besides the system's
    clipboard tools; None: the tools only."""
    config_path: Path | None = None
    """Settings file that ``/set --default`` writes; None: ``paths.config_file()``."""
    now: Callable[[], float] = time.time
    cwd: Callable[[], Path] = _default_cwd
    """Folder relative paths of /attach and /import start from."""
    exports_dir: Path | None = None
    """Folder /export writes to when given no path; None: ``paths.exports_dir()``."""
    interactive: bool = True
    """A UI that can open screens (``open_screen``); False for the CLI."""
    assume_yes: bool = False
    """Accept confirmations without asking (``--yes`` on the command line)."""
    list_models: Callable[[], Sequence[ModelEntry]] = catalog_models
    """Rows for /models and the model picker."""
    progress: Callable[[str, int | None, int | None], None] | None = None
    """Shows how a long command goes (a line, done, total): the UI's activity line."""
    cancel: threading.Event = field(default_factory=threading.Event)
    """Set (by the UI's escape) to stop a long command such as /docs add."""


@dataclass(frozen=True)
class Args:
    """A parsed argument list."""

    words: tuple[str, ...] = ()
    """Positional arguments; a free-text command gets its whole text as one word."""
    flags: frozenset[str] = frozenset()

    def get(self, index: int, default: str | None = None) -> str | None:
        return self.words[index] if index < len(self.words) else default


Handler = Callable[[CommandContext, Args], CommandResult]
Candidates = list[tuple[str, str]]
"""(value of the argument being typed, help) pairs."""
Completer = Callable[[CommandContext, "tuple[str, ...]", str], Candidates]
"""``completer(ctx, earlier_words, prefix)`` -> candidates for the word being typed."""


@dataclass(frozen=True)
class Command:
    name: str
    handler: Handler
    help: str
    """One line for /help and the completion list."""
    usage: str = ""
    """e.g. '/open ID_OR_TITLE'; '/name' when empty."""
    aliases: tuple[str, ...] = ()
    min_args: int = 0
    max_args: int | None = 0
    """None: any number of words."""
    text: bool = False
    """One free-text argument, the rest of the line as typed (quotes are text)."""
    unquote: bool = False
    """For a text command: a single quoted token loses its quotes ('"My chat"')."""
    flags: tuple[str, ...] = ()
    complete: Completer | None = None
    while_busy: bool = False
    """Safe to run while a reply is being generated."""
    details: str = ""
    """More text for ``/help NAME``."""
    explain: Callable[[CommandContext], str] | None = None
    """Text for ``/help NAME`` that depends on where it runs (e.g. a folder)."""

    @property
    def usage_line(self) -> str:
        return self.usage or f"/{self.name}"

    @property
    def takes_arguments(self) -> bool:
        return self.text or self.max_args != 0 or bool(self.flags)


def stored_id(session_id: int | None) -> int:
    if session_id is None:
        raise CommandError("That session is not stored.")
    return session_id


def last_stats(ctx: CommandContext) -> TurnStats | None:
    """The stats of the last turn, or of the last reply on the branch after a reopen."""
    return ctx.conversation.views.branch_stats()


def prefill_words(ctx: CommandContext, tokens: int, *, after: int = 0) -> str:
    """'~2 min 46 s to prefill (120 tok/s slowing to 41 as the context grows;
    measured on this model)': ``tokens`` at the end of the conversation
    (after ``after`` pending), at the speed measured for each context length;
    'between 35 s and 1 min 23 s' when only short chunks were measured and a
    pass's own cost, counted once a chunk or spread over their tokens, makes
    that much of a difference."""
    estimate = ctx.conversation.views.prefill_estimate(tokens, after=after)
    if estimate is None:
        return "prefill time unknown until the first turn"
    first = estimate.cost.rate(estimate.start) or 0.0
    last = estimate.cost.rate(estimate.start + tokens) or 0.0
    speed = (f"{first:,.0f} tok/s" if f"{first:,.0f}" == f"{last:,.0f}"
             else f"{first:,.0f} tok/s slowing to {last:,.0f} as the context grows")
    basis = "measured on this model" if estimate.measured_chunks else "from this chat's turns"
    took = f"~{fmt_seconds(estimate.seconds)}"
    if estimate.spread_over_tokens is not None:  # short chunks measured: a range
        took = (f"between {fmt_seconds(estimate.seconds)} and "
                f"{fmt_seconds(estimate.spread_over_tokens)}")
        basis += ", from short chunks"
    return f"{took} to prefill ({speed}; {basis})"


# -- formatting shared by the command modules (numbers: mlxchat.units) ---------


def ago(timestamp: float | None, now: float) -> str:
    """'just now', '5 min ago', '3 h ago', '2 days ago'."""
    if not timestamp:
        return "?"
    seconds = max(0.0, now - timestamp)
    if seconds < 60:
        return "just now"
    for size, unit in ((86400, "days"), (3600, "h"), (60, "min")):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {'day' if unit == 'days' and n == 1 else unit} ago"
    return "just now"


def first_words(text: str, limit: int = 40) -> str:
    line = one_line(text, limit)
    return line or "(empty)"


def pending_list(pending: list, args: Args, noun: str, usage: str,
                 describe: Callable[[Any], str]) -> CommandResult | None:
    """What ``/attach`` and ``/image`` say of what goes with the next message:
    ``--clear`` drops it all, no words list it; None when the command goes on
    with a path."""
    if "--clear" in args.flags:
        count = len(pending)
        pending.clear()
        return CommandResult.info(f"Dropped {plural(count, f'pending {noun}')}.",
                                  clear_input=True)
    if args.words:
        return None
    if not pending:
        return CommandResult.info(f"No pending {noun}s. Usage: {usage}")
    names = ", ".join(describe(item) for item in pending)
    return CommandResult.info(f"Going with your next message: {names}.")
