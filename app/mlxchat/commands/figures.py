"""Commands that report measured figures: /stats /cache /context."""

from __future__ import annotations

from pathlib import Path

from mlxchat.chat import human_bytes
from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    ago,
    first_words,
    last_stats,
)
from mlxchat.engine.events import EngineState
from mlxchat.sources import without_sources
from mlxchat.turn_stats import CACHE_SOURCE_WORDS, TurnStats
from mlxchat.units import fmt_int, fmt_report_percent, plural


def speculation_line(s: TurnStats) -> str:
    """What speculation proposed, kept and saved in a turn."""
    line = (f"{s.spec_mode}: {fmt_int(s.draft_tokens_accepted)} of "
            f"{fmt_int(s.draft_tokens_proposed)} proposed tokens accepted "
            f"({fmt_report_percent(s.draft_tokens_accepted, s.draft_tokens_proposed)}), "
            f"{s.tokens_per_pass:.2f} tokens per pass of the model")
    if s.draft_prefilled_tokens:
        line += (f"; the draft prefilled {fmt_int(s.draft_prefilled_tokens)} tokens"
                 + (" (its cache rebuilt from the prompt's token ids)" if s.draft_rebuilt
                    else ""))
    return line


def _bits(kv_bits: int | None) -> str:
    return f"{kv_bits}-bit" if kv_bits else "full precision"


def _reply(s: TurnStats) -> str:
    """How long the reply was, how fast, and why it ended (no rate from fewer
    than two tokens)."""
    if not s.generated_tokens:
        return f"no tokens, {s.ending}"
    rate = ", no rate from one token" if s.decode_tps is None else \
        f" at {s.decode_tps:.1f} tok/s"
    return f"{plural(s.generated_tokens, 'token')}{rate}, {s.ending}"


def stats(ctx: CommandContext, args: Args) -> CommandResult:
    s = last_stats(ctx)
    if s is None:  # none yet, or the first reply still streaming
        return CommandResult.info("No turn has ended yet in this session; /stats reports the "
                                  "last one once it ends.")
    live = ctx.conversation.turns.last_stats is s
    rows = [
        ("time to first token", "none (no token came)" if s.first_token_s is None
         else f"{s.first_token_s:.2f} s"),
        ("prompt", (f"{fmt_int(s.prompt_tokens)} tokens: {fmt_int(s.reused_tokens)} reused "
                    f"({s.source_words}), {fmt_int(s.prefilled_tokens)} prefilled")),
        ("prefill speed", "not measured (nothing prefilled)" if s.prefill_tps is None
         else f"{s.prefill_tps:,.0f} tok/s"),
        ("reply", _reply(s)),
        ("total time", f"{s.total_s:.2f} s"),
        ("context", (f"{fmt_int(s.context_used)} of {fmt_int(s.context_window)} tokens "
                     f"({fmt_report_percent(s.context_used, s.context_window)})")),
        ("KV cache", f"{human_bytes(s.kv_bytes)}, {_bits(s.kv_bits)}"),
        ("weights", human_bytes(s.weights_bytes)),
        ("peak memory", human_bytes(s.peak_memory_bytes)),
    ]
    if s.blas:
        rows.append(("BLAS", s.blas))
    if s.cpu_matmul:
        rows.append(("cpu matmul", s.cpu_matmul))
    if s.miss_reason:
        rows.insert(2, ("cache" if s.new_conversation else "cache miss", s.miss_reason))
    if s.reasoning_tokens:
        rows.insert(rows.index(next(r for r in rows if r[0] == "reply")) + 1,
                    ("reasoning", f"{fmt_int(s.reasoning_tokens)} tokens in {s.reasoning_s:.1f} s; "
                                  f"answer {fmt_int(s.answer_tokens)} tokens"
                                  + ("; closed at max_reasoning_tokens, then answered"
                                     if s.reasoning_budget_closed else "")))
    if s.dropped_messages:
        rows.append(("dropped to fit", f"{plural(s.dropped_messages, 'oldest message')}"))
    if s.spec_mode != "off":
        rows.append(("speculative", speculation_line(s)))
    caption = "Last turn" if live else "Last reply on this branch (as stored)"
    return CommandResult.table(caption, ("", ""), rows)


def _disk_row(ctx: CommandContext) -> tuple[str, str]:
    conv = ctx.conversation
    disk = conv.cache.on_disk()
    if disk.segments:
        missing = "" if disk.newest and disk.newest.exists() else " — FILE MISSING"
        shared = (f" ({human_bytes(disk.shared_bytes)} of it shared with other branches)"
                  if disk.shared_bytes else "")
        whole = (f"; the session's files {human_bytes(disk.session_bytes)}, each counted once"
                 if disk.session_bytes > disk.file_bytes else "")
        return ("on disk", (f"{plural(disk.segments, 'KV segment')} of this branch, "
                            f"{human_bytes(disk.file_bytes)}{shared}, "
                            f"tokens 0–{fmt_int(disk.tokens)}{whole}; "
                            f"newest {disk.newest}{missing}"))
    record = conv.saved.snapshot_record()
    if record is None:
        return ("on disk", "nothing saved yet (each turn writes the tokens it added)")
    missing = "" if Path(record.path).exists() else " — FILE MISSING"
    return ("on disk", (f"{record.path} ({human_bytes(record.file_bytes)}, "
                        f"{fmt_int(record.token_count)} tokens, {_bits(record.kv_bits)}, "
                        f"saved {ago(record.created, ctx.now())}){missing}"))


def per_token_text(state: EngineState) -> str:
    """What the next token adds to the KV cache, per layer kind: past its
    window a sliding-window layer adds nothing, so the average so far is not
    what the next tokens cost."""
    held = state.cached_tokens
    average = human_bytes(state.kv_bytes / held)
    layout = state.kv_layout
    if layout is None:
        return f"{average} (average so far)"
    text = f"{human_bytes(layout.added(held, 1))} for the next token"
    growing = [w for _, w in layout.windows if w > held]
    if growing:
        last = max(growing)
        text += (f" (sliding-window layers grow until {fmt_int(last)} tokens, then "
                 f"{human_bytes(layout.added(last, 1))})")
    elif layout.windows:
        text += (" (full-attention layers only: the sliding windows are full at "
                 f"{fmt_int(max(w for _, w in layout.windows))} tokens)")
    return f"{text}; average so far {average}"


def cache(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    state = conv.views.state()
    action = (args.get(0) or "").lower()
    if action == "save":
        if not state.cached_tokens:
            raise CommandError("The KV cache is empty; nothing to save.")
        path = conv.cache.save(conv.turns.last_stats)
        disk = conv.cache.on_disk()
        if path is None and disk.tokens >= state.cached_tokens:
            return CommandResult.info(f"All {fmt_int(state.cached_tokens)} tokens are on disk "
                                      f"already ({plural(disk.segments, 'KV segment')}).",
                                      clear_input=True)
        if path is None:
            raise CommandError("The KV cache could not be written; the log says why.")
        return CommandResult.info(f"Saved {fmt_int(state.cached_tokens)} tokens: the new ones "
                                  f"to {path} ({human_bytes(path.stat().st_size)}).",
                                  clear_input=True)
    if action == "drop":
        files = conv.cache.drop()
        return CommandResult.info(
            f"Dropped the live cache ({plural(state.cached_tokens, 'token')}) and "
            f"{plural(files, 'snapshot file')}; the next turn prefills from scratch.",
            session_changed=True, clear_input=True)
    if action:
        raise CommandError("Usage: /cache [save|drop]")
    dtype = state.kv_dtype if state.kv_dtype != "-" else _bits(state.kv_bits)
    share = fmt_report_percent(state.cached_tokens, state.context_window)
    cached = (f"{fmt_int(state.cached_tokens)} of {fmt_int(state.context_window)} "
              f"({share}), {CACHE_SOURCE_WORDS.get(state.cache_source, state.cache_source)}")
    rows = [("cached tokens", cached),
            ("KV cache", f"{human_bytes(state.kv_bytes)}, {dtype}")]
    if state.draft_model:
        rows.append(("draft KV cache", f"{human_bytes(state.draft_kv_bytes)} "
                                       f"({state.draft_model}; not saved, rebuilt on resume)"))
    if state.cached_tokens:
        rows.append(("per token", per_token_text(state)))
    s = last_stats(ctx)
    if s is not None:
        rows.append(("last turn", (f"{fmt_int(s.reused_tokens)} reused ({s.source_words}), "
                                   f"{fmt_int(s.prefilled_tokens)} prefilled")))
        rows.append(("miss reason", s.miss_reason or "none"))
    rows.append(_disk_row(ctx))
    snap = conv.cache.last_load
    if snap is not None:
        rows.append(("snapshot on open",
                     f"kept the live cache's {fmt_int(snap.tokens)} tokens (no file read)"
                     if snap.from_live else f"restored {fmt_int(snap.tokens)} tokens"
                     if snap.ok else f"not used: {snap.reason}"))
    return CommandResult.table("KV cache (/cache save writes a snapshot now; /cache drop "
                               "forgets it)", ("", ""), rows)


def complete_cache(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    return [("save", "write the live cache to the session's snapshot file now"),
            ("drop", "forget the live cache and delete the snapshot files")]


def _opening_row(text: str, tokens: int, window: int) -> tuple[str, ...]:
    """The template's own start: its default system prompt when it writes one."""
    words = text.removeprefix("system").strip() if text.startswith("system\n") else text
    what = (("system", f"(template default) {first_words(words)}") if words
            else ("template", "start of the prompt"))
    return ("", *what, fmt_int(tokens), fmt_report_percent(tokens, window))


def context(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    window = conv.views.context_window
    costs = conv.views.context_costs()
    messages, counts, total = costs.messages, costs.counts, costs.total
    pending = conv.turns.attachments
    if not messages and not pending:
        return CommandResult.info(f"The conversation is empty: 0 of {fmt_int(window)} tokens.")
    rows: list[tuple[str, ...]] = []
    for i, (m, n) in enumerate(zip(messages, counts, strict=True), 1):
        rows.append((str(i), m.role, first_words(without_sources(m.content)), fmt_int(n),
                     fmt_report_percent(n, window)))
        rows += [("", "recalled", s.path, fmt_int(s.tokens), fmt_report_percent(s.tokens, window))
                 for s in m.sources or () if conv.recall.message_id(s) is not None]
    pins = conv.pins.list()
    if pins and messages and messages[0].role == "system":
        # The system message holds the pinned documents: each gets its own row.
        own = counts[0] - sum(p.tokens for p in pins)
        prompt = conv.session.system_prompt
        rows[0] = ("1", "system", first_words(prompt) if prompt else "(pinned documents only)",
                   fmt_int(own), fmt_report_percent(own, window))
        rows[1:1] = [("", "pinned", p.name, fmt_int(p.tokens),
                      fmt_report_percent(p.tokens, window)) for p in pins]
    if costs.opening:
        rows.insert(0, _opening_row(costs.opening_text, costs.opening, window))
    overhead = total - sum(counts) - costs.opening
    if overhead > 0:
        rows.append(("", "template", "start of the reply", fmt_int(overhead),
                     fmt_report_percent(overhead, window)))
    for a in pending:
        rows.append(("+", "attached", a.path.name, fmt_int(a.tokens),
                     fmt_report_percent(a.tokens, window)))
    used = total + sum(a.tokens for a in pending)
    cached = conv.views.state().cached_tokens
    what = ("the conversation's token ledger, as the model saw it" if costs.from_ledger
            else "messages, template and generation prompt")
    caption = (f"{fmt_int(used)} of {fmt_int(window)} tokens "
               f"({fmt_report_percent(used, window)}) in the next prompt ({what}) · "
               f"{fmt_int(window - used)} free · replies up to "
               f"{fmt_int(conv.generation.max_tokens)} tokens · the KV cache holds "
               f"{fmt_int(cached)} now (the Context gauge: prompt and reply so far)")
    summary = next((m for m in messages if m.role == "summary"), None)
    if summary is not None and summary.compaction is not None:
        caption += (f" · compacted: {summary.compaction.headline()}, the messages after it "
                    "kept whole (/compact undo)")
    note = conv.views.ledger_note()
    if note:
        caption += f" · {note}"
    return CommandResult.table(caption, ("#", "role", "starts with", "tokens", "of window"),
                               rows)


COMMANDS = (
    Command("stats", stats, "Figures of the last turn: speed, cache reuse, memory",
            while_busy=True),
    Command("cache", cache, "What the KV cache holds and its snapshot; save or drop it",
            usage="/cache [save|drop]", max_args=1, complete=complete_cache),
    Command("context", context, "What fills the context window, message by message",
            while_busy=True),
)
