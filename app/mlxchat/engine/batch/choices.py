"""A turn's other choices (OpenAI's ``n``): the prompt is prefilled once; each
other choice is a batch member of its own, holding a copy of the prompt's KV,
sampled with a seed of its own, and read on a thread of its own while the
turn's reply (choice 0, the one the conversation keeps) decodes on the
engine's thread. A choice computes what it computes alone (its first token,
a reasoning budget's closing) under the compute lock, like any member; its
copy of the cache is dropped when it ends."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import mlx.core as mx

from mlxchat.engine.events import ChoiceDone, Event, TextDelta
from mlxchat.engine.kv import layers as kv_layers
from mlxchat.engine.results import Decode

RunChoice = Callable[["ChoiceCache", int, Callable[[Event], None]], Decode]
"""``(cache, choice, emit)`` -> the choice's decode (on the choice's thread)."""


@dataclass
class ChoiceCache:
    """What a reply's decode reads and writes of a live cache: a choice's own."""

    layers: list[Any]
    tokens: list[int] = field(default_factory=list)


class OtherChoices:
    """Choices 1 to ``count - 1`` of a turn, each on its thread."""

    def __init__(self, count: int, *, layers: list[Any], tokens: list[int],
                 emit: Callable[[Event], None]):
        # Copied now, on the engine's thread, before the reply feeds its tail.
        self._caches = [ChoiceCache([kv_layers.copy(c) for c in layers], list(tokens))
                        for _ in range(count - 1)]
        mx.eval([c.state for cache in self._caches for c in cache.layers])
        self._emit = emit
        self._threads: list[threading.Thread] = []
        self._failed: BaseException | None = None

    def start(self, run: RunChoice) -> None:
        for i, cache in enumerate(self._caches, start=1):
            t = threading.Thread(target=self._run, args=(run, cache, i),
                                 name=f"mlxchat-choice-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def _run(self, run: RunChoice, cache: ChoiceCache, choice: int) -> None:
        def emit(event: Event) -> None:
            if isinstance(event, TextDelta):
                self._emit(dataclasses.replace(event, choice=choice))
        try:
            out = run(cache, choice, emit)
            self._emit(ChoiceDone(choice, out.reply, out.reasoning, out.finish_reason,
                                  out.generated, list(out.token_ids)))
        except BaseException as exc:  # noqa: BLE001 - said on the engine's thread
            self._failed = exc
        finally:
            cache.layers = []
            # MLX aborts the process at exit if a thread's streams outlive it.
            mx.synchronize()
            mx.clear_streams()

    def join(self) -> None:
        """Wait for every choice to end (the caller is out of the compute
        lock's line); a choice's failure is raised here."""
        for t in self._threads:
            t.join()
        if self._failed is not None:
            raise self._failed
