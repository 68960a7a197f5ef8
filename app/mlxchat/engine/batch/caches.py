"""A member's cache layers joined into the batch's and taken back out.

mlx-lm's batch caches do the work: ``KVCache.merge`` makes a left-padded
``BatchKVCache`` (per-row offsets and a padding mask), ``RotatingKVCache``
a ``BatchRotatingKVCache``; ``extend`` adds a newcomer, ``extract`` gives a
row back as a plain cache holding exactly its positions (no padding) and
``filter`` drops it. Other layer kinds (a quantized KV cache, a recurrent
state, a model that keeps position state per cache) are decoded alone: which
kinds join is their rows' ``joins_batch`` (``kv/layers.py``).
"""

from __future__ import annotations

from typing import Any, Sequence

from mlxchat.engine.kv.layers import row

SPEC_OFF = "batched with other conversations"
"""Why a batched reply decodes one token a pass (its stats say it)."""

CHUNK_TOKENS = 256
"""A batched turn's prefill chunk, at most: between two of them the batch
decodes one step for the others. bench/batch_chunk.py, bundled model, two
others decoding, a 500-word newcomer, 2-core VM at load ~6.5: chunks of
64 / 256 / 1024 gave the newcomer 44 / 83 / 56 tok/s of prefill and the
others a longest gap of 0.91 / 0.61 / 0.75 s between tokens (noisy)."""

def refusal(model: Any, layers: Sequence[Any]) -> str | None:
    """Why a member with these layers cannot join a batch, or None."""
    if getattr(model, "follow_tokens", None) is not None:
        return "the model keeps position state per cache"
    kinds = {type(c).__name__ for c in layers if not row(c).joins_batch(c)}
    if kinds:
        return f"its cache layers ({', '.join(sorted(kinds))}) have no batch form"
    return None


def joined(batch: list[Any] | None, layers: Sequence[Any]) -> list[Any]:
    """The batch's layers with ``layers`` as a new last row."""
    rows = [type(c).merge([c]) for c in layers]
    if batch is None:
        return rows
    for mine, theirs in zip(batch, rows):
        mine.extend(theirs)
    return batch


def taken_out(batch: list[Any], index: int, size: int) -> tuple[list[Any], list[Any] | None]:
    """Row ``index`` of a batch of ``size`` as a member's own layers, and the
    batch without it (None once empty)."""
    own = [c.extract(index) for c in batch]
    keep = [i for i in range(size) if i != index]
    if not keep:
        return own, None
    for c in batch:
        c.filter(keep)
    return own, batch
