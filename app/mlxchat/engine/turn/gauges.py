"""The gauges' figures of an engine, read from what it holds (engine thread)."""

from __future__ import annotations

import mlx.core as mx

from mlxchat.engine.events import EngineState
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.speculative.drafting import Drafting
from mlxchat.engine.turn.ranks import Ranks
from mlxchat.models import LoadedModel, cpu_matmul
from mlxchat.turn_stats import TurnStats


def gauge_state(loaded: LoadedModel, live: LiveCache, *, window: int, ranks: Ranks,
                drafting: Drafting, busy: bool, stats: TurnStats | None) -> EngineState:
    """The engine's state as the gauges show it: the model, the live cache,
    the draft's, the ranks', and the last turn's figures."""
    info = loaded.info
    layout, per_rank = ranks.gauges(loaded)
    return EngineState(
        model_name=info.name, cached_tokens=len(live.tokens),
        context_window=min(window, info.context_window), kv_bytes=live.nbytes,
        kv_layout=live.layout, kv_bits=live.bits, kv_dtype=live.dtype_label,
        cache_source=live.held_from,
        weights_bytes=info.weights_bytes,
        kept_copies_bytes=cpu_matmul.held_bytes(loaded.model),
        bits_per_weight=info.bits_per_weight, scales_dtype=info.scales_dtype,
        quantization=info.quantization, compute_dtype=info.compute_dtype,
        peak_memory_bytes=mx.get_peak_memory(),
        draft_model=drafting.info.name if drafting.info else "",
        draft_kv_bytes=drafting.kv_bytes,
        busy=busy, last_stats=stats, layout=layout, ranks=per_rank)
