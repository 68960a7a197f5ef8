"""Shared pieces of the benchmarks: model choice and decode timing."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.models import LoadedModel
from mlxchat.session.conversation import Conversation


def small_llama() -> LoadedModel:
    """A random llama big enough that compute dominates (head_dim 64)."""
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    folder = Path(tempfile.mkdtemp(prefix="mlxchat-bench-"))
    return load_folder(write_tiny_model(folder, hidden_size=256, num_layers=4, num_heads=4,
                                        num_kv_heads=2, intermediate_size=688,
                                        context_window=4096))


def pick_model(name: str) -> LoadedModel:
    if name == "small-llama":
        return small_llama()
    from mlxchat.models import load_model

    return load_model(name)


def raw_decode_tps(loaded: LoadedModel, prompt_ids: list[int], max_tokens: int) -> tuple[float, float]:
    """(prefill tok/s, decode tok/s) of plain mlx_lm.stream_generate, timed like the engine:
    decode = (tokens - 1) / (last token time - first token time)."""
    from mlx_lm import stream_generate

    start = time.perf_counter()
    first = last = None
    n = 0
    for _ in stream_generate(loaded.model, loaded.tokenizer, prompt_ids, max_tokens=max_tokens):
        last = time.perf_counter()
        first = first or last
        n += 1
    prefill = len(prompt_ids) / (first - start)
    return prefill, (n - 1) / max(last - first, 1e-9)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def wall_ttft(conv: Conversation, text: str) -> tuple[float, TurnDone]:
    """Send ``text``: wall seconds to the first streamed text, and the TurnDone."""
    enter = time.perf_counter()
    first, done = None, None
    for event in conv.turns.send(text):
        if isinstance(event, TextDelta) and first is None:
            first = time.perf_counter() - enter
        elif isinstance(event, TurnDone):
            done = event
    assert done is not None
    return (first if first is not None else done.stats.ttft_s), done


@contextmanager
def temporary_home(prefix: str) -> Iterator[Path]:
    """A fresh MLXCHAT_HOME for one run (its stores, prefixes, config), removed after."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    home = os.environ.get("MLXCHAT_HOME")
    os.environ["MLXCHAT_HOME"] = str(folder)
    try:
        yield folder
    finally:
        if home is None:
            os.environ.pop("MLXCHAT_HOME", None)
        else:
            os.environ["MLXCHAT_HOME"] = home
        shutil.rmtree(folder, ignore_errors=True)


def greedy_conversation(loaded: LoadedModel, *, max_tokens: int,
                        prefix: str) -> tuple[Conversation, Path]:
    """A greedy conversation on ``loaded`` in a store of its own, in a fresh
    folder (returned: remove it after); speculation off, as auto's one-off
    timing pass would skew a turn."""
    from mlxchat.config import Settings
    from mlxchat.engine.core import ChatEngine
    from mlxchat.store import open_store

    settings = Settings()
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = max_tokens
    settings.generation.speculative = "off"
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    conv = Conversation(settings=settings, store=open_store(folder / "b.db"),
                        engine=ChatEngine(loaded), model_spec="bench")
    return conv, folder
