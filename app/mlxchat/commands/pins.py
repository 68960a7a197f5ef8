"""Commands on pinned documents: /pin /unpin /pins."""

from __future__ import annotations

from collections.abc import Sequence

from mlxchat.chat import human_bytes
from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandResult,
    one_line,
)
from mlxchat.commands.completers import complete_files
from mlxchat.commands.turns import kv_sizer, read_text_file
from mlxchat.errors import MlxchatError
from mlxchat.units import fmt_int, fmt_report_percent, plural


def pin(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    if not args.words:
        return pins(ctx, args)
    path, text = read_text_file(ctx, args.words[0], conv.views.window_left(), verb="pin",
                                verbed="pinned")
    pinned = conv.pins.pin(path, text)
    window = conv.views.context_window
    kv = human_bytes(kv_sizer(ctx)[0](pinned.tokens, after=0))
    return CommandResult.info(
        f"Pinned {pinned.name}: {fmt_int(pinned.tokens)} tokens after the system prompt "
        f"({fmt_report_percent(pinned.tokens, window)} of the {fmt_int(window)}-token window, "
        f"~{kv} of KV cache). Its KV is computed once and shared by every session that pins "
        "it; the next turn starts a new token ledger.", session_changed=True, clear_input=True)


def unpin(ctx: CommandContext, args: Args) -> CommandResult:
    gone = ctx.conversation.pins.unpin(args.words[0])
    names = ", ".join(p.name for p in gone)
    return CommandResult.info(f"Unpinned {names}; the next turn prefills the conversation "
                              "without it (no message changed).", session_changed=True,
                              clear_input=True)


def complete_pinned(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    pinned = ctx.conversation.session.pins
    out = [(p.name, f"{fmt_int(p.tokens)} tokens") for p in pinned]
    return out + ([("all", f"every pinned document ({len(pinned)})")] if pinned else [])


def pins(ctx: CommandContext, args: Args) -> CommandResult:
    views = ctx.conversation.pins.list()
    if not views:
        return CommandResult.info("No pinned documents. /pin FILE puts one after the system "
                                  "prompt, shared with every session that pins it.")
    me = ctx.conversation.session.id
    size, _ = kv_sizer(ctx)  # from the live cache: /pins runs during a reply
    rows = []
    for v in views:
        others = [u for u in v.sessions if u.session_id != me]
        used = "this one" + (f" + {plural(len(others), 'other')}: " if others else "") + \
            ", ".join(f"#{u.session_id} {one_line(u.title, 24)}" for u in others[:3])
        rows.append((v.name, fmt_int(v.tokens), human_bytes(size(v.tokens, after=0)), used,
                     "yes" if v.stored else "after the next turn"))
    total = sum(v.tokens for v in views)
    return CommandResult.table(
        f"{plural(len(views), 'pinned document')}, {fmt_int(total)} tokens after the system "
        "prompt", ("document", "tokens", "KV", "sessions using it", "prefix stored"), rows)


COMMANDS = (
    Command("pin", pin, "Pin a text file after the system prompt; its KV is shared",
            usage="/pin FILE", text=True, unquote=True, max_args=1, complete=complete_files,
            details="The document becomes part of the system prompt, so every session that "
                    "pins the same document (with the same system prompt and model) loads its "
                    "KV from the prefix store instead of prefilling it. Folders, binary or "
                    "non-UTF-8 files, a document already pinned and one that does not fit the "
                    "window are refused."),
    Command("unpin", unpin, "Unpin a document (or all); no message changes",
            usage="/unpin NAME | all", text=True, unquote=True, min_args=1, max_args=1,
            complete=complete_pinned),
    Command("pins", pins, "List pinned documents: tokens, KV bytes, sessions using them",
            while_busy=True),
)


def pin_files(ctx: CommandContext, files: Sequence[str], *,
              session_id: int | None = None) -> CommandResult:
    """Pin each file to the open session, or first open ``session_id`` (``mlxchat
    --pin``, the sessions screen). Stops at the first refusal and says which."""
    conv = ctx.conversation
    try:
        if session_id is not None and session_id != conv.session.id:
            conv.open_session(session_id)
        said = [pin(ctx, Args((name,))).text for name in files]
    except MlxchatError as exc:  # what was opened or pinned before stays: reload it
        return CommandResult("error", one_line(exc.user_text()), session_changed=True)
    return CommandResult.info("\n".join(said), session_changed=True)
