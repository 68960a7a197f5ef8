"""Session commands: /new /sessions /open /rename /delete /fork /branch /export /import /quit."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, cast

from mlxchat import paths
from mlxchat.chat import human_bytes
from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    Confirmation,
    ago,
    one_line,
    stored_id,
)
from mlxchat.commands.completers import (
    complete_current_title,
    complete_files,
    complete_json_files,
    complete_sessions,
    user_path,
)
from mlxchat.store import SessionNotFound
from mlxchat.store.export import FORMATS, ExportFormat
from mlxchat.units import fmt_int, plural

if TYPE_CHECKING:
    from mlxchat.store import BranchInfo

log = logging.getLogger(__name__)

IMPORT_LIMIT_BYTES = 256 << 20


def _title(title: str) -> str:
    return f"“{one_line(title, 60)}”"


@contextmanager
def _named(wanted: str) -> Iterator[None]:
    """A session named by id or title that is not there: the in-app list to look in."""
    try:
        yield
    except SessionNotFound:
        raise CommandError(f"No session matches {one_line(wanted, 40)!r}; /sessions lists "
                           "them with their ids.") from None


def new(ctx: CommandContext, args: Args) -> CommandResult:
    session = ctx.conversation.new_session()
    return CommandResult.info(f"New session #{session.id}.", session_changed=True,
                              clear_input=True)


def sessions(ctx: CommandContext, args: Args) -> CommandResult:
    search = args.get(0)
    rows = ctx.conversation.saved.list(limit=100, search=search)
    screen = "sessions" if ctx.interactive and not search else None
    if not rows:
        text = f"No session matches {search!r}." if search else "No saved sessions yet."
        return CommandResult.info(text, open_screen=screen)
    now, current = ctx.now(), ctx.conversation.session.id
    columns = ["id", "title", "messages", "updated", "snapshot"]
    table = []
    for r in rows:
        row = [f"#{r.id}" + (" *" if r.id == current else ""), one_line(r.title, 60),
               fmt_int(r.message_count), ago(r.updated, now),
               human_bytes(r.snapshot_bytes) if r.snapshot_bytes else "-"]
        if search:
            row.append(one_line(r.snippet, 80))
        table.append(row)
    if search:
        columns.append("match")
    caption = (f"{plural(len(rows), 'session')} matching {search!r}" if search else
               f"{plural(len(rows), 'session')}, newest first (* is open; /open ID_OR_TITLE)")
    return CommandResult.table(caption, columns, table, open_screen=screen)


def open_(ctx: CommandContext, args: Args) -> CommandResult:
    if not args.words:
        if ctx.interactive:
            return CommandResult.info("Choose a session to open.", open_screen="sessions")
        raise CommandError("Usage: /open ID_OR_TITLE")
    with _named(args.words[0]):
        session = ctx.conversation.open_session(args.words[0])
    n = len(session.messages)
    notice = ctx.conversation.speculation.notice
    return CommandResult.info(
        f"Opened #{session.id} {_title(session.title)} ({plural(n, 'message')} on this branch; "
        f"{ctx.conversation.cache.words()})." + (f" {notice}." if notice else ""),
        session_changed=True, clear_input=True)


def rename(ctx: CommandContext, args: Args) -> CommandResult:
    session = ctx.conversation.saved.rename(args.words[0])
    return CommandResult.info(f"Renamed #{session.id} to {_title(session.title)}.",
                              session_changed=True, clear_input=True)


def delete(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    with _named(args.words[0] if args.words else ""):
        target = conv.saved.find(args.words[0]) if args.words else conv.session
    session_id = stored_id(target.id)
    snap = conv.saved.snapshot_record(session_id)
    extra = f" and its {human_bytes(snap.file_bytes)} KV snapshot" if snap else ""
    which = "this session" if session_id == conv.session.id else "session"
    question = (f"Delete {which} #{session_id} {_title(target.title)} "
                f"({plural(len(target.messages), 'message')} on its current branch, every branch "
                f"included{extra})? This cannot be undone.")

    def accept() -> CommandResult:
        return _delete(ctx, session_id)
    return CommandResult("confirm", question,
                         confirm=Confirmation(question, accept, yes="Delete"))


def _delete(ctx: CommandContext, session_id: int) -> CommandResult:
    done = ctx.conversation.delete_session(session_id)
    text = (f"Deleted #{session_id} {_title(done.title)} and "
            f"{plural(done.files, 'snapshot file')}.")
    if done.left:
        text += f" Could not delete {', '.join(done.left)}; remove it by hand."
    if done.replacement is None:
        return CommandResult.info(text)
    return CommandResult.info(f"{text} New session #{done.replacement.id}.",
                              session_changed=True, clear_input=True)


def fork(ctx: CommandContext, args: Args) -> CommandResult:
    source, copy = ctx.conversation.fork()
    return CommandResult.info(
        f"Forked #{source.id} into #{copy.id} {_title(copy.title)} with "
        f"{plural(len(copy.messages), 'message')}; you are in the fork now.",
        session_changed=True, clear_input=True)


def _leaf_id(text: str) -> int:
    number = text.strip().removeprefix("#")
    if not (number.isdigit() and number.isascii() and len(number) < 19):
        raise CommandError(f"{one_line(text, 40)!r} is not a message id. "
                           "Usage: /branch [LEAF_ID]")
    return int(number)


def _diverges(b: BranchInfo, limit: int) -> str:
    who = "you" if b.diverge_role == "user" else "reply"
    return f"{who}: {one_line(b.preview, limit)}" if b.preview else f"{who}: (empty)"


def _inside(ctx: CommandContext, found: list[BranchInfo]) -> str:
    """Where the current position is when no branch ends there (after /undo)."""
    if any(b.current for b in found):
        return ""
    at = ctx.conversation.session.leaf_id
    if at is None:
        return ". You are before the first message: the next one starts a new branch."
    leaves = ctx.conversation.saved.leaves_holding(at)
    held = ", ".join(f"#{leaf}" for leaf in leaves)
    return (f". You are at #{at}, inside the branch{'es' if len(leaves) > 1 else ''} "
            f"ending at {held}: the next message starts a new branch there.")


def branch(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    found = conv.saved.branches()
    if not args.words:
        if not found:
            return CommandResult.info("This session has no messages yet.")
        rows = [(f"#{b.leaf_id}", fmt_int(b.message_count), _diverges(b, 40),
                 ago(b.updated, ctx.now()), "current" if b.current else "") for b in found]
        return CommandResult.table(
            f"{len(found)} branch{'' if len(found) == 1 else 'es'} of #{conv.session.id} "
            "(/branch LEAF switches; each row "
            "shows its first message that no other branch has)" + _inside(ctx, found),
            ("leaf", "messages", "where it diverges", "updated", ""), rows)
    target = _leaf_id(args.words[0])
    if target in {b.leaf_id for b in found}:
        session = conv.saved.switch_branch(target)
        return CommandResult.info(
            f"On the branch ending at #{session.leaf_id} "
            f"({plural(len(session.messages), 'message')}).",
            session_changed=True, clear_input=True)
    leaves = conv.saved.leaves_holding(target)
    session = conv.saved.switch_branch(target)
    held = ", ".join(f"#{leaf}" for leaf in leaves)
    return CommandResult.info(
        f"#{target} is not the end of a branch; "
        + ("1 branch holds it" if len(leaves) == 1 else f"{len(leaves)} branches hold it")
        + f" (ending at {held}). On the newest, ending at #{session.leaf_id} "
        f"({plural(len(session.messages), 'message')}).", session_changed=True,
        clear_input=True)


def complete_branches(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    return [(str(b.leaf_id), f"{plural(b.message_count, 'message')} · {_diverges(b, 40)}"
             + (" · current" if b.current else ""))
            for b in ctx.conversation.saved.branches()]


def export(ctx: CommandContext, args: Args) -> CommandResult:
    fmt = args.words[0].lower()
    if fmt not in FORMATS:
        raise CommandError(f"Unknown format {one_line(args.words[0], 20)!r}: use md or json. "
                           "Usage: /export md|json [PATH]")
    conv = ctx.conversation
    path = conv.saved.export(cast(ExportFormat, fmt), args.get(1), cwd=ctx.cwd(),
                             folder=_exports_folder(ctx))
    size = human_bytes(path.stat().st_size)
    what = "the current branch" if fmt == "md" else "every branch"
    return CommandResult.info(f"Exported #{conv.session.id} ({what}) to {path} ({size}).",
                              clear_input=True)


def _exports_folder(ctx: CommandContext) -> Path:
    return (ctx.exports_dir or paths.exports_dir()).expanduser()


def explain_export(ctx: CommandContext) -> str:
    return (f"Without PATH it writes a file named after the title in {_exports_folder(ctx)}"
            f"{os.sep}; PATH is a file or folder of yours, relative to {ctx.cwd()}. The "
            "message after writing gives the full path.")


def complete_export(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    if not words:
        return [("md", "Markdown of the current branch"),
                ("json", "every branch, lossless; /import reads it")]
    return complete_files(ctx, words, prefix)


def import_(ctx: CommandContext, args: Args) -> CommandResult:
    path = user_path(ctx, args.words[0])
    if not path.exists():
        raise CommandError(f"No such file: {path}")
    if not path.is_file():
        raise CommandError(f"{path} is not a file; give an exported .json file.")
    if path.stat().st_size > IMPORT_LIMIT_BYTES:
        raise CommandError(f"{path} is {human_bytes(path.stat().st_size)}; too large to be "
                           "a session export.")
    conv = ctx.conversation
    session = conv.saved.import_file(path)
    text = (f"Imported {path.name} as #{session.id} {_title(session.title)} "
            f"({plural(len(session.messages), 'message')} on its current branch)")
    if session.model and session.model != conv.model_spec:
        return CommandResult.info(f"{text}. It uses the model {session.model}: "
                                  f"/open #{session.id} switches to it.", clear_input=True)
    conv.open_session(stored_id(session.id))
    return CommandResult.info(f"{text}; it is open now.", session_changed=True,
                              clear_input=True)


def quit_(ctx: CommandContext, args: Args) -> CommandResult:
    return CommandResult.info("Bye.", quit=True)


COMMANDS = (
    Command("new", new, "Start a new empty session"),
    Command("sessions", sessions, "List saved sessions, or search their titles and messages",
            usage="/sessions [SEARCH]", text=True, unquote=True, max_args=1, while_busy=True),
    Command("open", open_, "Open a saved session (restores its KV cache snapshot)",
            usage="/open [ID_OR_TITLE]", text=True, unquote=True, max_args=1,
            complete=complete_sessions),
    Command("rename", rename, "Rename the current session", usage="/rename TITLE",
            text=True, unquote=True, min_args=1, max_args=1, complete=complete_current_title),
    Command("delete", delete, "Delete a session (the current one by default), after asking",
            usage="/delete [ID_OR_TITLE]", text=True, unquote=True, max_args=1,
            complete=complete_sessions),
    Command("fork", fork, "Copy the current branch into a new session and switch to it"),
    Command("branch", branch, "List the branches of this session, or switch to one",
            usage="/branch [LEAF_ID]", max_args=1, complete=complete_branches,
            details="/edit and /retry keep the old version on its own branch; "
                    "nothing is lost. The list shows where each branch diverges: the edited "
                    "question, or the first words of a retried reply. Any message id works "
                    "too: it opens the newest branch holding that message."),
    Command("export", export, "Write this session as Markdown or JSON",
            usage="/export md|json [PATH]", min_args=1, max_args=2, complete=complete_export,
            details="PATH is a file or folder under the exports folder (default: the "
                    "folder mlxchat was started in); without it the name comes from the "
                    "title.", explain=explain_export),
    Command("import", import_, "Import a session from a JSON export",
            usage="/import PATH.json", min_args=1, max_args=1, complete=complete_json_files),
    Command("quit", quit_, "Leave mlxchat (the session is saved)", aliases=("exit", "q"),
            while_busy=True),
)
