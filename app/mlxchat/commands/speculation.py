"""Speculative decoding: /draft, and what /set speculative|draft do."""

from __future__ import annotations

from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandResult,
    last_stats,
)
from mlxchat.units import fmt_int

HARDWARE_NOTE = (
    "Speculation never changes the reply: at temperature 0 it is token for token what plain "
    "decoding gives. Whether it is faster depends on the device. The model verifies k "
    "proposed tokens in one forward pass; on Apple GPUs decoding is bound by memory "
    "bandwidth, so that pass costs about as much as one token and every accepted proposal "
    "is a pass saved. On the Linux CPU build a quantized matmul is bound by compute, so "
    "verifying k tokens costs about k passes. Measured there with the bundled SmolLM2-135M "
    "(bench/speculation.py, a busy machine): the model as its own draft accepted 100% of its "
    "proposals (4 tokens per pass) and still ran at 0.37x of plain decoding; prompt lookup ran "
    "at 0.95x on a reply that copies the prompt (3.56 tokens per pass) and at 0.24x on free "
    "text. So the "
    "default is auto: once per model, after the first reply, the app times a verifying "
    "pass on this device against a decode step; after every reply it replays prompt lookup "
    "over the reply and uses it for the next one only when that replay, at the measured "
    "pass cost and corrected by lookup's own measured speed, says it is 1.1x faster; "
    "/draft shows what it measured. A draft model is never loaded unasked.")


def _auto(conv) -> str:
    if conv.generation.seed is not None:
        return "auto, plain decoding while a seed is set (a seed gives the same reply)"
    cost = conv.speculation.verify_cost()
    if cost is None:
        return ("auto (prompt lookup where it measurably decodes faster: the verifying pass "
                "measured once after the first reply of a few tokens, each reply replayed)")
    return f"auto ({cost.words()})"


def _status(ctx: CommandContext) -> str:
    conv = ctx.conversation
    gen = conv.generation
    draft = conv.speculation.draft_name()
    mode = {"off": "off", "lookup": "prompt lookup (no draft model)",
            "draft": f"draft model {draft or gen.draft}", "auto": _auto(conv)}[gen.speculative]
    text = f"Speculative decoding: {mode}; {gen.draft_tokens} tokens proposed per pass."
    if gen.speculative != "draft" and draft:
        text += f" The draft model {draft} is loaded."
    s = last_stats(ctx)
    if s is not None and s.spec_mode != "off":
        text += (f" Last reply: {fmt_int(s.draft_tokens_accepted)} of "
                 f"{fmt_int(s.draft_tokens_proposed)} proposed tokens accepted "
                 f"({s.acceptance:.0%}), {s.tokens_per_pass:.2f} tokens per pass.")
    return text


def set_draft(ctx: CommandContext, raw: str) -> CommandResult:
    """``/set draft SPEC|auto|off`` and ``/draft SPEC|auto|off``."""
    conv = ctx.conversation
    word = raw.strip()
    if word.lower() in ("off", "none"):
        conv.speculation.set_draft(None)
        return CommandResult.info("The draft model is unloaded; speculative decoding with "
                                  f"it is off (speculative = {conv.generation.speculative}).",
                                  clear_input=True)
    spec = conv.speculation.paired_draft() if word.lower() == "auto" else word
    name = conv.speculation.set_draft(spec)
    return CommandResult.info(
        f"Speculating with the draft model {name} ({spec}), "
        f"{conv.generation.draft_tokens} tokens per pass, from the next reply; the reply is "
        "the same, the speed depends on the device (/help draft).",
        session_changed=True, clear_input=True)


def set_mode(ctx: CommandContext, mode: str) -> CommandResult:
    """``/set speculative off|draft|lookup``."""
    conv = ctx.conversation
    conv.speculation.set_speculative(mode)
    return CommandResult.info(f"speculative = {mode} for this session. {_status(ctx)}",
                              clear_input=True)


def draft(ctx: CommandContext, args: Args) -> CommandResult:
    if args.words:
        return set_draft(ctx, args.words[0])
    paired = ctx.conversation.speculation.paired_draft_hint()
    hint = f" The catalog pairs {paired} with this model (/draft auto)." if paired else ""
    return CommandResult.info(_status(ctx) + hint)


def complete_draft(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    if words:
        return []
    out = [("off", "unload the draft model")]
    paired = ctx.conversation.speculation.paired_draft_hint()
    if paired:
        out.insert(0, ("auto", f"the catalog's pairing: {paired}"))
    return out


COMMANDS = (
    Command("draft", draft, "Speculative decoding: show it, or load a draft model",
            usage="/draft [SPEC|auto|off]", text=True, unquote=True, max_args=1,
            complete=complete_draft, while_busy=False,
            details="SPEC is a model with the same tokenizer, smaller (an alias, a Hugging "
                    "Face repo, a folder); auto takes the catalog's pairing (a small Qwen3 "
                    "for Qwen3, Llama 3.2 1B for Llama 3.x). /set speculative lookup "
                    "speculates without a draft model: it proposes the tokens that followed "
                    "the last earlier occurrence of the latest few tokens. /set draft_tokens "
                    "N sets how many are proposed per pass. Models whose caches cannot be "
                    "trimmed (sliding windows, recurrent layers) cannot speculate.\n\n"
                    + HARDWARE_NOTE),
)
