"""Commands on document collections and what a message retrieved: /docs, /sources.

Indexing reports through ``ctx.progress``; the UI's escape (or quitting) sets
``ctx.cancel``: the files read so far are written whole, and ``/docs update``
carries on.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mlxchat.chat import human_bytes, relative_time
from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    Confirmation,
    one_line,
)
from mlxchat.commands.completers import complete_path
from mlxchat.commands.tuning import SETTINGS
from mlxchat.generation import DOCS_BUDGET_AUTO_MIN, DOCS_BUDGET_SHARE, DOCS_NAME
from mlxchat.sources import (
    Source,
    below_floor_words,
    best_score,
    left_out_words,
    relevance_words,
)
from mlxchat.units import fmt_int, fmt_seconds, plural

if TYPE_CHECKING:
    from mlxchat.docs import IndexProgress, IndexReport
    from mlxchat.session.retrieval import Retrieved

PROGRESS_INTERVAL_S = 0.2
"""At most this often an index reports how it goes."""
SHOWN_SKIPS = 8


def docs(ctx: CommandContext, args: Args) -> CommandResult:
    if not args.words:
        return listing(ctx)
    action, rest = args.words[0].lower(), args.words[1:]
    handler = ACTIONS.get(action)
    if handler is None:
        raise CommandError(f"Unknown /docs action {one_line(action, 20)!r}: use "
                           f"{', '.join(ACTIONS)} (see /help docs).")
    if action == "add":
        return add(ctx, rest, follow_links="--follow-links" in args.flags)
    if args.flags:
        raise CommandError("--follow-links goes with /docs add only.")
    return handler(ctx, rest)


def listing(ctx: CommandContext) -> CommandResult:
    retrieval = ctx.conversation.retrieval
    rows = [(c.name + (" (in use)" if c.name == retrieval.in_use else ""), fmt_int(c.files),
             fmt_int(c.chunks), human_bytes(c.bytes), relative_time(c.updated))
            for c in retrieval.collections()]
    if not rows:
        return CommandResult.info("No document collections yet. /docs add [NAME] PATH... "
                                  "indexes files and folders; each message then retrieves "
                                  "from it.")
    return CommandResult.table(using_line(ctx), ("collection", "files", "chunks", "bytes",
                                                 "updated"), rows)


def using_line(ctx: CommandContext) -> str:
    conv = ctx.conversation
    settings = conv.generation
    if settings.docs is None:
        return "This session retrieves nothing (/docs use NAME)."
    budget = (f"{fmt_int(settings.docs_budget)} tokens" if settings.docs_budget else
              f"auto: 1/{DOCS_BUDGET_SHARE} of the window (at least {DOCS_BUDGET_AUTO_MIN}), "
              f"{fmt_int(conv.retrieval.budget())} tokens now")
    return (f"This session retrieves from {settings.docs}: up to "
            f"{plural(settings.docs_k, 'chunk')} per message, budget {budget}.")


def use(ctx: CommandContext, words: Sequence[str]) -> CommandResult:
    if len(words) != 1:
        raise CommandError("Usage: /docs use NAME | off")
    retrieval = ctx.conversation.retrieval
    if words[0].lower() in ("off", "none"):
        retrieval.use(None)
        return CommandResult.info("Retrieval is off for this session; earlier messages keep "
                                  "their sources.", session_changed=True)
    info = retrieval.use(words[0])
    assert info is not None
    return CommandResult.info(f"This session retrieves from {info.name} ({plural(info.files, 'file')}, "
                              f"{plural(info.chunks, 'chunk')}). {using_line(ctx)}",
                              session_changed=True)


def add(ctx: CommandContext, words: Sequence[str], *,
        follow_links: bool = False) -> CommandResult:
    """/docs add [NAME] PATH... [--follow-links]: a first word that is no path and a
    valid name names it."""
    if not words:
        raise CommandError("Usage: /docs add [NAME] PATH... [--follow-links]")
    base = ctx.cwd()
    name: str | None = None
    if len(words) > 1 and DOCS_NAME.match(words[0]) and not (base / words[0]).exists():
        name, words = words[0], words[1:]
    paths = [base / Path(w).expanduser() for w in words]
    retrieval = ctx.conversation.retrieval
    name = name or retrieval.in_use or _name_for(paths[0])
    report = retrieval.add(name, paths, on_progress=_reporter(ctx, "indexing"),
                           cancel=_fresh_cancel(ctx), follow_links=follow_links)
    used = ""
    if retrieval.in_use is None and not report.cancelled:
        retrieval.use(name)
        used = f" This session now retrieves from {name}."
    return _report(report, used)


def update(ctx: CommandContext, words: Sequence[str]) -> CommandResult:
    name = words[0] if words else ctx.conversation.retrieval.in_use
    if name is None:
        raise CommandError("Usage: /docs update NAME (no collection is in use here).")
    report = ctx.conversation.retrieval.update(name, on_progress=_reporter(ctx, "re-indexing"),
                                               cancel=_fresh_cancel(ctx))
    return _report(report, "")


def remove(ctx: CommandContext, words: Sequence[str]) -> CommandResult:
    if len(words) != 1:
        raise CommandError("Usage: /docs remove NAME")
    retrieval = ctx.conversation.retrieval
    info = retrieval.collection(words[0])

    def accept() -> CommandResult:
        gone = retrieval.remove(info.name)
        return CommandResult.info(f"Removed {gone.name} ({plural(gone.files, 'file')}, "
                                  f"{plural(gone.chunks, 'chunk')}); messages that retrieved "
                                  "from it keep their sources.", session_changed=True)
    question = (f"Remove the collection {info.name} and its index ({plural(info.files, 'file')}, "
                f"{plural(info.chunks, 'chunk')})? Your files are not touched.")
    return CommandResult("confirm", question,
                         confirm=Confirmation(question, accept, yes="Remove"))


def tune(name: str):
    def handler(ctx: CommandContext, words: Sequence[str]) -> CommandResult:
        setting = f"docs_{name}"
        if len(words) != 1:
            raise CommandError(f"Usage: /docs {name} N" + (" | auto" if name == "budget" else ""))
        value = SETTINGS[setting].parse(setting, words[0])
        ctx.conversation.update_generation(
            dataclasses.replace(ctx.conversation.session.settings, **{setting: value}))
        return CommandResult.info(using_line(ctx), session_changed=True)
    return handler


def search(ctx: CommandContext, words: Sequence[str]) -> CommandResult:
    """/docs search [NAME] QUERY: what a message of QUERY would retrieve from the
    collection NAME (a first word that names one, followed by more), else from
    the one in use (nothing is sent)."""
    retrieval = ctx.conversation.retrieval
    names = {c.name for c in retrieval.collections()}
    named = words[0] if len(words) > 1 and words[0] in names else None
    query = " ".join(words[1:] if named else words)
    if named is None and retrieval.in_use is None:
        raise CommandError("No collection is in use here: /docs search NAME QUERY names one "
                           "(/docs lists them), or /docs use NAME first.")
    if not query.strip():
        raise CommandError("Usage: /docs search [NAME] QUERY")
    found = retrieval.retrieve(query, remember=False, collection=named)
    assert found is not None
    if not found.sources:
        if found.left_out:
            return CommandResult.info(f"Nothing in {found.collection} fits: "
                                      f"{plural(found.left_out, 'source')} matched but none "
                                      f"fits the {fmt_int(found.budget)}-token budget.")
        return CommandResult.info(f"Nothing in {found.collection} is close enough to send "
                                  f"({plural(found.below_floor, 'match')} below the relevance "
                                  "floor)." if found.below_floor else
                                  f"No matches in {found.collection}.")
    return sources_table(found.sources, found)


def sources(ctx: CommandContext, args: Args) -> CommandResult:
    """/sources: what the last message of the branch with sources retrieved."""
    conv = ctx.conversation
    found = next((m for m in reversed(conv.messages) if m.role == "user" and m.sources), None)
    if found is None:
        return CommandResult.info("No message on this branch retrieved anything. "
                                  + using_line(ctx))
    last = conv.retrieval.last
    return sources_table(found.sources or [],
                         last if last is not None and last.sources == found.sources else None)


def sources_table(found: list[Source], retrieved: Retrieved | None = None) -> CommandResult:
    """The sources as a table; with what retrieving them measured when known."""
    total = sum(s.tokens for s in found)
    caption = f"{plural(len(found), 'source')} from {found[0].collection}, {fmt_int(total)} tokens"
    if retrieved is not None:
        caption += (f"; {left_out_words(retrieved.left_out, retrieved.budget)}"
                    if retrieved.left_out else f" of a {fmt_int(retrieved.budget)}-token budget")
        if retrieved.below_floor:
            caption += f"; {below_floor_words(retrieved.below_floor)}"
        if retrieved.forecast_s is not None:
            caption += f"; ~{fmt_seconds(retrieved.forecast_s)} to prefill"
    best = best_score(found)
    rows = [(f"[{s.n}]", s.place, s.heading or "-", relevance_words(s.score, best),
             fmt_int(s.tokens), s.stale or "") for s in found]
    return CommandResult.table(caption, ("#", "file:lines", "heading", "relevance", "tokens",
                                         "note"), rows)


# -- helpers ---------------------------------------------------------------------------


def _name_for(path: Path) -> str:
    """A collection name from a folder or file name ('My Notes/' -> 'My-Notes')."""
    stem = path.resolve().name if path.is_dir() else path.stem
    name = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in stem).strip("-.")[:64]
    return name if name and DOCS_NAME.match(name) else "docs"


def _fresh_cancel(ctx: CommandContext):
    ctx.cancel.clear()
    return ctx.cancel


def _reporter(ctx: CommandContext, verb: str):
    shown = 0.0

    def report(p: IndexProgress) -> None:
        nonlocal shown
        now = time.monotonic()
        if ctx.progress is None or (now - shown < PROGRESS_INTERVAL_S
                                    and p.files_done < p.files_total):
            return
        shown = now
        ctx.progress(f"{verb} {p.words()} · escape cancels", *p.work())
    return report


def _report(report: IndexReport, extra: str) -> CommandResult:
    if report.cancelled:
        return CommandResult.info(
            f"Cancelled: {plural(report.files_indexed, 'file')} of {report.collection} indexed "
            f"before the stop, nothing half-written. /docs update {report.collection} carries "
            "on.")
    parts = [f"{report.collection}: {plural(report.files_indexed, 'file')} indexed "
             f"({report.speed_words()})",
             f"{fmt_int(report.files_unchanged)} unchanged", f"{fmt_int(report.files_removed)} "
             "removed", f"{fmt_int(len(report.skipped))} skipped"]
    text = ", ".join(parts) + "."
    if report.files_with_replacements:
        text += (f" {plural(report.files_with_replacements, 'file')} not valid UTF-8 (bad "
                 "bytes replaced).")
    text += extra  # before the list of skipped files, one a line
    for skip in report.skipped[:SHOWN_SKIPS]:
        text += f"\nskipped {skip.path}: {skip.reason}"
    if len(report.skipped) > SHOWN_SKIPS:
        text += f"\n… and {len(report.skipped) - SHOWN_SKIPS} more skipped"
    return CommandResult.info(text, session_changed=bool(extra))


def complete_docs(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    if not words:
        return [(a, help_) for a, help_ in ACTION_HELP.items()]
    if words[0] in ("use", "remove", "update", "search") and len(words) == 1:
        names = [(c.name, f"{fmt_int(c.chunks)} chunks")
                 for c in ctx.conversation.retrieval.collections()]
        return names + ([("off", "stop retrieving")] if words[0] == "use" else [])
    if words[0] == "add":
        return complete_path(ctx, prefix)
    if words[0] == "budget" and len(words) == 1:
        return [("auto", f"1/{DOCS_BUDGET_SHARE} of the window, at least "
                         f"{DOCS_BUDGET_AUTO_MIN}")]
    return []


def off(ctx: CommandContext, words: Sequence[str]) -> CommandResult:
    """'/docs off', as the usage line reads, is '/docs use off'."""
    if words:
        raise CommandError("Usage: /docs off")
    return use(ctx, ["off"])


ACTIONS = {"use": use, "off": off, "add": add, "update": update, "remove": remove, "k": tune("k"),
           "budget": tune("budget"), "search": search}
ACTION_HELP = {
    "use": "retrieve from a collection for this session (or off)",
    "off": "stop retrieving for this session",
    "add": "index files and folders into a collection",
    "update": "re-index what changed",
    "remove": "delete a collection's index",
    "k": "chunks per message (1-20)",
    "budget": "tokens the chunks may take (or auto)",
    "search": "what a message would retrieve (from NAME, else the collection in use), "
              "without sending",
}

COMMANDS = (
    Command("docs", docs, "Document collections: list, use, add, update, remove, search",
            usage="/docs [use NAME|off · add [NAME] PATH... · update [NAME] · remove NAME · "
                  "k N · budget N|auto · search [NAME] QUERY]", max_args=None,
            complete=complete_docs,
            flags=("--follow-links",),
            details="With a collection in use, each message retrieves its best chunks (hybrid "
                    "BM25 + embeddings; none far less relevant than the best, identical text "
                    "once) within the token budget, puts them in front of the "
                    "question as numbered sources, and asks the reply to cite them as [n]; the "
                    "transcript shows [n] as file:line. What was retrieved is stored with the "
                    "message, so reopening, retrying or exporting never retrieves again. "
                    "Indexing can be cancelled with escape: whole files only are kept. "
                    "Symlinks that lead out of the folders given are skipped and named, "
                    "unless --follow-links (kept for the collection's updates)."),
    Command("sources", sources,
            "Show what the last message retrieved: file:lines, relevance, tokens",
            while_busy=True),
)
