"""Will a model fit? What it needs (weights, plus the KV cache at a context
length) against what this machine can give, worked out before loading or
downloading it.

The weights are the folder's safetensors (the index's total when there is
one); the KV cache per token follows the config's attention layout: full
attention layers keep every token, sliding-window layers at most their window,
and recurrent layers (linear attention) a fixed state that is not counted per
token. The machine gives the GPU's recommended working set on Apple silicon
(``mx.device_info``), else the available RAM (``/proc/meminfo``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxchat.chat import human_bytes
from mlxchat.models.errors import ModelError

MIN_CONTEXT = 512
"""Below this a chat is not worth having: the model is refused instead."""


@dataclass(frozen=True)
class KVLayout:
    """Bytes the KV cache takes per token, split by how layers keep tokens:
    layers that keep every token grow with each one; a sliding-window (or
    chunked) layer grows only until it holds its window, then stays."""

    full_bytes_per_token: int
    """Summed over layers that keep every token."""
    windows: tuple[tuple[int, int], ...] = ()
    """(bytes per token, window in tokens) of each group of windowed layers."""

    def bytes_at(self, context: int) -> int:
        return (self.full_bytes_per_token * context
                + sum(b * min(context, w) for b, w in self.windows))

    def added(self, held: int, more: int) -> int:
        """Bytes ``more`` tokens add to a cache holding ``held``."""
        return self.bytes_at(held + more) - self.bytes_at(held)

    def tokens_within(self, held: int, room: int) -> int | None:
        """The most tokens a cache holding ``held`` can add in ``room`` bytes;
        None when it has stopped growing (no full layers, every window full)."""
        pos, left = held, max(room, 0)
        for edge in [*sorted({w for _, w in self.windows if w > held}), None]:
            rate = self.full_bytes_per_token + sum(b for b, w in self.windows if w > pos)
            if edge is None:
                return None if rate == 0 else pos - held + left // rate
            if rate * (edge - pos) > left:
                return pos - held + left // rate
            left -= rate * (edge - pos)
            pos = edge
        return None  # unreachable: the loop ends at edge None

    def scaled(self, numerator: int, denominator: int = 1) -> KVLayout:
        """Every rate times ``numerator / denominator``, rounded up (a dtype
        twice as wide; one rank's share)."""
        return KVLayout(-(-self.full_bytes_per_token * numerator // denominator),
                        tuple((-(-b * numerator // denominator), w) for b, w in self.windows))


def _text_config(config: dict) -> dict:
    return config.get("text_config", config)


def _attention_kinds(cfg: dict) -> tuple[int, int]:
    """(full attention layers, sliding-window layers)."""
    layers = int(cfg.get("num_hidden_layers", 0))
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list) and kinds:
        full = sum(1 for k in kinds if k in ("full_attention", "attention"))
        sliding = sum(1 for k in kinds if k == "sliding_attention")
        return full, sliding
    if cfg.get("full_attention_interval"):  # hybrid: linear layers keep a fixed state
        return layers // int(cfg["full_attention_interval"]), 0
    pattern = cfg.get("sliding_window_pattern")
    if pattern and cfg.get("sliding_window"):
        full = layers // int(pattern)
        return full, layers - full
    return layers, 0


def kv_layout(config: dict, dtype_bytes: int) -> KVLayout:
    """The KV cache's bytes per token from a model's config.json."""
    cfg = _text_config(config)
    heads = int(cfg.get("num_attention_heads", 0) or 0)
    kv_heads = int(cfg.get("num_key_value_heads", heads) or 0)
    head_dim = int(cfg.get("head_dim") or (cfg.get("hidden_size", 0) // heads if heads else 0))
    per_layer = 2 * kv_heads * head_dim * dtype_bytes  # keys and values
    full, sliding = _attention_kinds(cfg)
    window = int(cfg.get("sliding_window") or 0)
    if not (sliding and window):
        return KVLayout((full + sliding) * per_layer)
    return KVLayout(full * per_layer, ((sliding * per_layer, window),))


def folder_weights_bytes(folder: Path) -> int:
    """Bytes of the weights on disk: the index's total_size, else the files' sizes."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
            if isinstance(total, int) and total > 0:
                return total
        except (OSError, ValueError):
            pass
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


@dataclass(frozen=True)
class Available:
    bytes: int
    source: str
    """'recommended GPU working set' or 'available RAM'."""


def _meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_memory(device_info: dict[str, Any] | None = None,
                     meminfo: Path = Path("/proc/meminfo")) -> Available | None:
    """What this machine can give a model now; None when it cannot be told."""
    if device_info is None:
        import mlx.core as mx

        device_info = mx.device_info() if hasattr(mx, "device_info") else {}
    recommended = device_info.get("max_recommended_working_set_size")
    if recommended:
        return Available(int(recommended), "recommended GPU working set")
    ram = _meminfo_available(meminfo)
    return Available(ram, "available RAM") if ram else None


@dataclass(frozen=True)
class Fit:
    context: int
    """The context the model gets: the one asked for, or the largest that fits."""
    needed_bytes: int
    """Weights plus the KV cache at ``context``."""
    note: str | None = None
    """Set when the context was lowered to fit."""


def fit_context(name: str, weights: int, layout: KVLayout, context: int,
                available: Available | None, *, asked: bool = False) -> Fit:
    """The context to load ``name`` with. Raises ModelError (one line, with the
    numbers) when the weights leave no room for MIN_CONTEXT tokens, or when the
    context was ``asked`` for explicitly and does not fit (naming the largest that does)."""
    need = weights + layout.bytes_at(context)
    if available is None or need <= available.bytes:
        return Fit(context, need)
    room = available.bytes - weights - layout.bytes_at(MIN_CONTEXT)
    more = layout.tokens_within(MIN_CONTEXT, room)
    largest = context if more is None else MIN_CONTEXT + more
    have = f"this machine can give {human_bytes(available.bytes)} ({available.source})"
    wants = (f"{name} needs {human_bytes(need)} ({human_bytes(weights)} of weights + "
             f"{human_bytes(need - weights)} of KV cache at {context:,} tokens)")
    if room < 0 or largest < MIN_CONTEXT:
        raise ModelError(f"{wants}; {have}: too little even for {MIN_CONTEXT:,} tokens")
    largest = min(largest, context)
    if asked:
        raise ModelError(f"{wants}; {have}: --context {largest} fits")
    return Fit(largest, weights + layout.bytes_at(largest),
               f"{wants}; {have}, so its context is capped at {largest:,} tokens")


def entry_fit(size_bytes: int | None, kv: KVLayout | int | None, context: int | None,
              available: Available | None, *, kv_scale: int = 1) -> tuple[int | None, str]:
    """For a catalog row: (bytes needed at the full context, whether it fits:
    'yes', 'up to N tokens', 'no' or '?'). ``kv`` the layout from the model's
    config, or the catalog's bytes per token; ``kv_scale`` 2 on the CPU (float32 KV)."""
    if isinstance(kv, int):
        kv = KVLayout(kv)
    if not size_bytes or kv is None or not kv.bytes_at(1) or not context:
        return None, "?"
    layout = kv.scaled(kv_scale)
    need = size_bytes + layout.bytes_at(context)
    if available is None:
        return need, "?"
    try:
        fit = fit_context("", size_bytes, layout, context, available)
    except ModelError:
        return need, "no"
    return need, "yes" if fit.context == context else f"up to {fit.context:,} tokens"


def check_download(name: str, size_bytes: int | None, available: Available | None) -> None:
    """Before a download: refuse a model whose weights alone will not fit."""
    if size_bytes and available is not None and size_bytes > available.bytes:
        raise ModelError(f"{name} needs {human_bytes(size_bytes)} for its weights alone; this "
                         f"machine can give {human_bytes(available.bytes)} "
                         f"({available.source}); not downloaded")
