"""A tiny vision-language model through the engine, as every family's turn
test drives it: a prompt's ids, and six turns (an image first, three text
follow-ups, a second image in turn 5) warm on one engine, resumed on a fresh
model and engine each turn from the KV segments so far, and cold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.disk.segments import SegmentRef
from mlxchat.engine.events import TurnDone
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.generation import GenerationSettings

from .conftest import load

GREEDY = GenerationSettings(temperature=0.0, max_tokens=8)
TURNS = [("What is in this picture?", 0), ("And the colours?", None), ("Say more.", None),
         ("Anything else?", None), ("Compare it with this one.", 1), ("Which is brighter?", None)]
"""Six turns: an image first, three text follow-ups, a second image in turn 5."""
MODES = ("warm", "resumed", "cold")


def run(engine: ChatEngine, prompt: FittedPrompt) -> TurnDone:
    done = [ev for ev in engine.turn(prompt, GREEDY) if isinstance(ev, TurnDone)]
    assert len(done) == 1
    return done[0]


def prompt_ids(loaded, images, text: str = "What is it?") -> list[int]:
    """The ids of a first user message with ``images`` (negative: an image's key)."""
    engine = ChatEngine(loaded)
    try:
        return engine.prompts.message_ids(text, system=None, previous=None, images=images)
    finally:
        engine.close()


@dataclass
class Run:
    """Six turns in one mode: replies, stats, the tower's calls and the new
    message's ids per turn, and the whole token ledger."""

    replies: list[str]
    stats: list[Any]
    calls: list[int]
    sizes: list[int]
    ledger: list[int]


def conversation(folder: Path, images, tmp_path: Path, mode: str) -> Run:
    """The six turns on one engine (warm), on a fresh model and engine each turn
    restored from the KV segments written so far (resumed), or on a fresh one
    each turn with nothing restored (cold)."""
    loaded = load(folder)
    engine = ChatEngine(loaded)
    messages, ledger, refs, previous = [], [], [], None
    out = Run([], [], [], [], ledger)
    for i, (text, image) in enumerate(TURNS):
        shown = () if image is None else (images[image],)
        if mode != "warm":
            engine.close()
            loaded = load(folder)
            engine = ChatEngine(loaded)
            if mode == "resumed" and refs:
                assert engine.load_segments(refs, conversation=messages).ok
        added = engine.prompts.message_ids(text, system=None, previous=previous, images=shown)
        messages.append(Message("user", text, images=shown))
        out.sizes.append(len(added))
        before = loaded.model.vision_calls
        done = run(engine, FittedPrompt(ledger + added, list(messages), 0, ledger=True))
        out.calls.append(loaded.model.vision_calls - before)
        out.replies.append(done.reply)
        out.stats.append(done.stats)
        ledger += added + done.token_ids
        previous = done.token_ids
        messages.append(Message("assistant", done.reply, token_ids=done.token_ids))
        start = refs[-1].end if refs else 0
        info = engine.save_segment(tmp_path / f"{mode}{i}.safetensors", start)
        refs.append(SegmentRef(tmp_path / f"{mode}{i}.safetensors", start, info.end,
                               info.checksum, engine.cached_tokens[start:info.end]))
    engine.close()
    return out


def three_ways(folder: Path, images, tmp_path: Path, *,
               before: Callable[[str], None] | None = None) -> dict[str, Run]:
    """The six turns in every mode (``before(mode)`` first): the same replies,
    none empty; a resumed turn reuses and prefills what the warm one did, a
    cold one the same prompt from scratch; each warm follow-up prefills only
    its new message (the second image's span with it, in turn 5): the previous
    prompt and reply are reused."""
    runs = {}
    for mode in MODES:
        if before is not None:
            before(mode)
        runs[mode] = conversation(folder, images, tmp_path, mode)
    warm, resumed, cold = (runs[mode] for mode in MODES)
    assert warm.replies == resumed.replies == cold.replies and all(warm.replies)
    for w, r, c in zip(warm.stats, resumed.stats, cold.stats):
        assert c.reused_tokens == 0 and c.prefilled_tokens == c.prompt_tokens
        assert (w.reused_tokens, w.prefilled_tokens) == (r.reused_tokens, r.prefilled_tokens)
        assert w.prompt_tokens == r.prompt_tokens == c.prompt_tokens
    for prev, w, added in zip(warm.stats, warm.stats[1:], warm.sizes[1:]):
        assert w.reused_tokens == prev.context_used
        assert w.prefilled_tokens == added
        assert w.miss_reason is None
    return runs
