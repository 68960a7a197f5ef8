"""Commands on the turns of the conversation: /retry /edit /undo /system /attach /copy."""

from __future__ import annotations

import re
from codecs import getincrementaldecoder
from pathlib import Path
from typing import Callable

from mlxchat import clipboard
from mlxchat.chat import NO_SYSTEM_ROLE, Attachment, Message, attachment_block, human_bytes
from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    one_line,
    pending_list,
    prefill_words,
)
from mlxchat.commands.completers import complete_files, user_path
from mlxchat.files import FileRefused, FileTooLarge, read_head, read_limited
from mlxchat.units import fmt_int, fmt_report_percent, plural

ATTACH_LIMIT_BYTES = 8 << 20
MAX_BYTES_PER_TOKEN = 24
"""No tokenizer we ship packs more bytes than this into one token on real text;
a file larger than the free window times this cannot fit, so it is not tokenized."""
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")


# -- /retry /edit /undo ---------------------------------------------------------


def retry(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    turn = conv.turns.retry()
    temperature = conv.generation.temperature
    if temperature is None:
        temperature = conv.views.model_info.sampling.values()["temperature"]
    same = (" At temperature 0 it is the same reply again (/set temperature 0.7 varies it)."
            if temperature == 0 and conv.generation.seed is None else "")
    return CommandResult.info("Answering the last message again; the old reply stays on "
                              f"its branch (/branch).{same}", turn=turn, session_changed=True,
                              clear_input=True)


def edit(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    last = conv.turns.last_user_text()
    if last is None:
        raise CommandError("There is no message to edit yet.")
    if not args.words:
        hint = ("Edit the message and press enter" if ctx.interactive
                else "Run /edit NEW TEXT to replace it")
        return CommandResult.info(f"{hint}; the old version stays on its branch.",
                                  prefill_input=f"/edit {last}")
    turn = conv.turns.edit_last(args.words[0])
    return CommandResult.info("Answering the edited message; the old version stays on its "
                              "branch (/branch).", turn=turn, session_changed=True,
                              clear_input=True)


def undo(ctx: CommandContext, args: Args) -> CommandResult:
    removed = ctx.conversation.turns.undo()
    return CommandResult.info(f"Stepped back {plural(removed, 'message')}; they stay on their "
                              "branch (/branch lists it).", session_changed=True,
                              clear_input=True)


# -- /system ------------------------------------------------------------------------


def system(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    current = conv.session.system_prompt
    if "--clear" in args.flags:
        if args.words:
            raise CommandError("Usage: /system [TEXT] or /system --clear")
        conv.set_system_prompt(None)
        return CommandResult.info("System prompt cleared; the next turn prefills the "
                                  "conversation again.", session_changed=True, clear_input=True)
    if not args.words:
        if not current:
            return CommandResult.info("No system prompt (the model's template default "
                                      "applies). /system TEXT sets one.")
        tokens = conv.views.message_tokens([Message("system", current)])[0]
        return CommandResult.info(f"System prompt ({fmt_int(tokens)} tokens):\n{current}")
    text = args.words[0]
    conv.set_system_prompt(text)
    tokens = conv.views.message_tokens([Message("system", text)])[0]
    cost = (" The next turn prefills the conversation again (the cache starts with the "
            "old prompt)." if text != current and conv.messages else "")
    if not conv.views.model_info.system_role:
        cost += f" Note: {NO_SYSTEM_ROLE}."
    return CommandResult.info(f"System prompt set ({fmt_int(tokens)} tokens).{cost}",
                              session_changed=True, clear_input=True)


def complete_system(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    current = ctx.conversation.session.system_prompt
    return [(current, "the current system prompt")] if current else []


# -- /attach --------------------------------------------------------------------------


def kv_sizer(ctx: CommandContext) -> tuple[Callable[..., int], str]:
    """``size(tokens, after=None)``: the bytes ``tokens`` tokens take in the KV
    cache placed after ``after`` (default: after what it holds), per layer
    kind (a sliding-window layer stops growing once it holds its window); and
    how that was found. The engine is asked only when the cache is empty."""
    conv = ctx.conversation
    state = conv.views.state()
    layout, held = state.kv_layout, state.cached_tokens
    if held and layout is not None:
        def size(tokens: int, after: int | None = None) -> int:
            return layout.added(held if after is None else after, tokens)
        return size, "measured from the live cache"
    per_token = conv.views.kv_bytes_per_token()
    return (lambda tokens, after=None: tokens * per_token,
            "measured on a two-token cache (the live one is empty)")


def read_text_file(ctx: CommandContext, raw: str, free: int, *, verb: str = "attach",
                   verbed: str = "attached") -> tuple[Path, str]:
    """The UTF-8 text of the file ``raw`` names, or a one-line CommandError
    (a folder, too large for ``free`` tokens, binary, not UTF-8, empty)."""
    path = user_path(ctx, raw)
    name = path.name or str(path)
    if path.is_dir():
        raise CommandError(f"{path} is a folder; {verb} a text file.")
    binary = f"{name} looks binary (it has NUL bytes); only text files can be {verbed}."
    not_utf8 = f"{name} is not UTF-8 text; only text files can be {verbed}."
    try:  # what the file is, whatever its size, before whether it fits
        head = read_head(path)
        if b"\0" in head:
            raise CommandError(binary)
        try:
            getincrementaldecoder("utf-8")().decode(head)  # a cut last character is no fault
        except UnicodeDecodeError:
            raise CommandError(not_utf8) from None
        data = read_limited(path, min(ATTACH_LIMIT_BYTES, max(free, 0) * MAX_BYTES_PER_TOKEN))
    except FileTooLarge as exc:
        raise CommandError(f"{name} is {human_bytes(exc.size)}, too large for the "
                           f"{fmt_int(max(free, 0))} tokens left in the context window.") \
            from None
    except FileRefused as exc:
        raise CommandError(f"{exc} {verb.capitalize()} a text file.") from None
    if not data:
        raise CommandError(f"{name} is empty; nothing to {verb}.")
    if b"\0" in data:
        raise CommandError(binary)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CommandError(not_utf8) from None
    return path, text


def attach(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    pending = conv.turns.attachments
    listed = pending_list(pending, args, "attachment", "/attach PATH",
                          lambda a: f"{a.path.name} ({fmt_int(a.tokens)} tokens)")
    if listed is not None:
        return listed
    window = conv.views.context_window
    free = conv.views.window_left() - sum(a.tokens for a in pending)
    path, text = read_text_file(ctx, args.words[0], free)
    resolved = path.resolve()
    if any(a.path.resolve() == resolved for a in pending):
        raise CommandError(f"{path.name} is attached already; /attach --clear drops it.")
    messages = conv.engine_messages()
    block = conv.turns.compose("")  # the wrapping of the files already pending
    with_file = attachment_block(path.name, text)
    tokens = (conv.views.count_tokens(messages + [Message("user", f"{block}{with_file}")])
              - conv.views.count_tokens(messages + [Message("user", block)]))
    if tokens > free:
        raise CommandError(f"{path.name} is {fmt_int(tokens)} tokens; only {fmt_int(free)} "
                           f"are left in the {fmt_int(window)}-token window.")
    size, how = kv_sizer(ctx)
    kv = size(tokens)
    prefill = prefill_words(ctx, tokens, after=sum(a.tokens for a in pending))
    pending.append(Attachment(path, text, tokens))
    return CommandResult.info(
        f"Attached {path.name}: {fmt_int(tokens)} tokens "
        f"({fmt_report_percent(tokens, window)} of the {fmt_int(window)}-token window; "
        f"{fmt_int(free - tokens)} left after it) · "
        f"~{human_bytes(kv)} of KV cache ({human_bytes(kv / max(tokens, 1))}/token, "
        f"{how}) · {prefill}. It goes in front of your next message.", clear_input=True)


# -- /copy ----------------------------------------------------------------------------


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block; an unclosed last block runs to the end."""
    blocks: list[tuple[str, str]] = []
    fence, lang = "", ""
    body: list[str] = []
    for line in markdown.splitlines():
        match = _FENCE.match(line)
        if not fence:
            if match:
                fence, lang, body = match.group(1), match.group(2), []
        elif (match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence)
              and not match.group(2) and line.strip() == match.group(1)):
            blocks.append((lang, "\n".join(body)))
            fence = ""
        else:
            body.append(line)
    if fence:
        blocks.append((lang, "\n".join(body)))
    return blocks


def _last_reply(ctx: CommandContext) -> Message:
    reply = next((m for m in reversed(ctx.conversation.messages) if m.role == "assistant"), None)
    if reply is None or not reply.content:
        raise CommandError("There is no reply to copy yet.")
    return reply


def copy(ctx: CommandContext, args: Args) -> CommandResult:
    reply = _last_reply(ctx)
    text, what = reply.content, "the last reply"
    if args.words:
        raw = args.words[0]
        if not (raw.isdigit() and raw.isascii() and 0 < len(raw) < 6 and int(raw) > 0):
            raise CommandError(f"{one_line(raw, 20)!r} is not a code block number. "
                               "Usage: /copy [N]")
        blocks = code_blocks(reply.content)
        n = int(raw)
        if not blocks:
            raise CommandError("The last reply has no code blocks; /copy copies all of it.")
        if n > len(blocks):
            raise CommandError(f"The last reply has {plural(len(blocks), 'code block')}; "
                               f"choose 1 to {len(blocks)}.")
        lang, text = blocks[n - 1]
        what = f"code block {n} of {len(blocks)}" + (f" ({lang})" if lang else "")
    ways = clipboard.copy(text, terminal=ctx.clipboard)
    return CommandResult.info(f"Copied {what} ({fmt_int(len(text))} characters) "
                              f"{clipboard.said(ways)}.", clear_input=True)


def complete_copy(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    reply = next((m for m in reversed(ctx.conversation.messages) if m.role == "assistant"),
                 None)
    blocks = code_blocks(reply.content) if reply else []
    return [(str(i), f"{lang or 'code'} · {one_line(code, 40)}")
            for i, (lang, code) in enumerate(blocks, 1)]


COMMANDS = (
    Command("retry", retry, "Answer the last message again (the old reply is kept)"),
    Command("edit", edit, "Edit the last message and answer it (the old version is kept)",
            usage="/edit [TEXT]", text=True, max_args=1),
    Command("undo", undo, "Step back before the last message (kept on its branch)"),
    Command("system", system, "Show or set the system prompt of this session",
            usage="/system [TEXT | --clear]", text=True, max_args=1, flags=("--clear",),
            complete=complete_system),
    Command("attach", attach, "Put a text file into the next message, after showing its cost",
            usage="/attach PATH | --clear", text=True, unquote=True, max_args=1,
            flags=("--clear",), complete=complete_files, while_busy=True,
            details="Shows the file's tokens, its share of the window, the KV cache it "
                    "will take and its prefill time before you send. Binary files, files "
                    "that do not fit the window and folders are refused."),
    Command("copy", copy, "Copy the last reply, or its Nth code block, to the clipboard",
            usage="/copy [N]", max_args=1, complete=complete_copy, while_busy=True),
)
