"""A raw prompt run on the engine: token ids straight through the model, no
chat template and no conversation, in the lane like every turn; nothing is
stored (the chat session whose KV it displaced gets its branch back from its
segments on its next turn). Ollama's ``raw`` generate and its fill-in-the-middle
``suffix`` run here."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Iterator

from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.engine.turn.constrained import CompiledFormat
from mlxchat.server.core.errors import ApiError, server_stopped
from mlxchat.server.core.reply_reader import StopWatch
from mlxchat.server.core.service import ChatService, Finished, Piece, started_unless_gone


def raw_work(service: ChatService, prompt_ids: Callable[[Any], list[int]], *,
             settings: dict[str, Any], stop: list[str], output: CompiledFormat | None,
             cancelled: threading.Event) -> Iterator[Piece | Finished]:
    """On the lane's thread: ``prompt_ids(tokenizer)``'s tokens through the engine,
    the reply as pieces, then ``Finished``."""
    if cancelled.is_set():
        return
    engine = service.engine
    generation = dataclasses.replace(service.conv.settings.generation, context_policy="stop",
                                     **settings)
    generation.check()
    tokens = prompt_ids(engine.loaded.tokenizer)
    window = engine.prompts.window(generation)
    if len(tokens) + 1 > window:
        raise ApiError(400, f"The prompt has {len(tokens):,} tokens; this model's window "
                       f"is {window:,}.", param="prompt", code="context_length_exceeded")
    service.cache_taken = True
    watch = StopWatch(stop)
    done: TurnDone | None = None
    turn = engine.turn(FittedPrompt(tokens, [], 0), generation, output=output)
    for event in started_unless_gone(turn, cancelled):
        if cancelled.is_set() or watch.stopped:
            engine.cancel()
        if isinstance(event, TextDelta):
            text = watch.feed(event.text)  # no template: reasoning is text like any other
            if text:
                yield Piece(text)
        elif isinstance(event, TurnDone):
            done = event
    if done is None:
        return
    if done.stats.finish_reason == "cancelled" and not watch.stopped:
        raise server_stopped()
    rest = watch.flush()
    if rest:
        yield Piece(rest)
    reason = "stop" if watch.stopped else {"length": "length"}.get(
        done.stats.finish_reason, "stop")
    yield Finished(watch.seen, "", done.stats, reason, None)
