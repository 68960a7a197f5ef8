"""Images encoded as soon as they are attached: the engine side.

``ChatEngine.images.hold(refs, settings)`` queues a job on the engine thread
that runs the vision tower (and projector) for the images going with the next
message while the user types the question, so the turn that shows them finds
their features ready and runs no tower. Jobs run in the engine's order: a turn
sent before the job ran waits for it (the tower runs once, in the job), and
one sent while it runs waits for it to end. A newer ``hold`` supersedes an
older one still queued (it holds every pending image: none forgets them), and
a job queued before the model was switched does nothing.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from mlxchat.chat import ImageRef
from mlxchat.engine.thread.worker import EngineClosed
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel


@dataclass(frozen=True)
class Encoded:
    """What one ``hold`` job did."""

    tower_calls: int = 0
    """Vision tower calls it made (0: the features were kept, or it was superseded)."""
    seconds: float = 0.0
    """Seconds it took, none of them in the next turn's time to first token."""


def done_encoding(value: Encoded = Encoded()) -> Future:
    """A Future of ``value``, done (nothing queued)."""
    fut: Future = Future()
    fut.set_result(value)
    return fut


class EarlyImages:
    """The hold jobs of one engine: asked from any thread, run on the engine's."""

    def __init__(self, *, later: Callable[[Callable[[], Any]], Future],
                 loaded: Callable[[], LoadedModel], match: Callable[[str | None], None]):
        self._later = later
        self._loaded = loaded
        self._match = match
        """Casts the model to a compute dtype, as the turn will (the same features)."""
        self._asked = itertools.count(1)
        self._latest = 0
        self._lock = threading.Lock()

    def hold(self, refs: Sequence[ImageRef], settings: GenerationSettings) -> Future:
        """Queue the tower for ``refs``, every image going with the next message
        (none: forget those held). A Future of ``Encoded``: done at once when the
        model sees no images or the engine is closed."""
        loaded = self._loaded()
        if not loaded.info.sees_images:
            return done_encoding()
        with self._lock:
            number = self._latest = next(self._asked)
        wanted = list(refs)

        def job() -> Encoded:
            if number != self._latest or self._loaded().model is not loaded.model:
                return Encoded()  # superseded, or another model: its turn encodes
            start = time.perf_counter()
            self._match(settings.compute_dtype)
            calls = self._loaded().model.hold_early(wanted)
            return Encoded(calls, time.perf_counter() - start)
        try:
            return self._later(job)
        except EngineClosed:
            return done_encoding()
