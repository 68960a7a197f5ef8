"""A tiny random model whose reply never ends by itself, for tests that stop a
reply mid-way (a kill, a signal): it must outlast their checkpoints whatever
the kernels' rounding makes of a seed, at whatever speed they decode."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx

from mlxchat.models.testing.text import SPECIALS, write_tiny_model


def never_ending(folder: Path, *, context_window: int = 16384) -> Path:
    """A random model with its special tokens (the end of a turn among them)
    out of reach: their output rows zeroed and the others scaled up tenfold, so
    their logits stay at 0, far below the likeliest token's. A random model
    otherwise samples its end about once in 259 tokens."""
    model = write_tiny_model(folder, context_window=context_window)
    weights = mx.load(str(model / "model.safetensors"))
    head = weights["lm_head.weight"] * 10.0
    weights["lm_head.weight"] = mx.concatenate([mx.zeros_like(head[:len(SPECIALS)]),
                                                head[len(SPECIALS):]])
    mx.save_safetensors(str(model / "model.safetensors"), weights)
    return model
