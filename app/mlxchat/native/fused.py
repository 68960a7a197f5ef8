"""The native extension's fused CPU ops in place of ``mx.fast.rms_norm``,
``rope`` and ``scaled_dot_product_attention``, which have no CPU kernel in MLX:
each expands there into 8-20 primitive ops, each dispatched on its own, and
attention materializes its scores and mask. mlx-lm's models (every family)
call them through ``mx.fast`` at each step, so wrapping them there covers all
of them with no model code touched.

mlx-lm's plain ``KVCache`` writes a step's keys and values into its buffers
(a slice update each, in place) and slices both back out for the attention:
the slices its ``update_and_fetch`` returns are noted, and the attention
wrapper, given one, reads the first ``offset`` rows of the buffers instead
(``kv_len``): two ops a layer fewer. The slices stay correct, lazy and never
evaluated unless a model uses them otherwise.

A wrapper hands a call to the extension only on the CPU, with no stream
asked, in the dtypes and forms the kernel takes (attention: float32, no
sinks); any other call goes to MLX's own function unchanged. Installed only
on Linux where the extension is loaded (``mlxchat.native.module()``): on
macOS nothing is patched and Metal serves as before.
"""

from __future__ import annotations

import sys
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlxchat import native

_NAMES = ("rms_norm", "rope", "scaled_dot_product_attention")
_ORIGINAL: dict[str, Any] = {}
_FLOATS = (mx.float32, mx.float16, mx.bfloat16)
_STATE = {"gpu": True}
"""Whether this MLX has a GPU (read at install): without one, every call is on the CPU."""
_FOLDED: dict[int, tuple] = {}
"""id(keys slice) -> (the keys slice, the values slice, the keys buffer, the
values buffer, rows): what the last ``update_and_fetch`` of each KV cache
returned and what it stands for."""
_BY_CACHE: dict[int, int] = {}
"""id(cache) -> id(its last keys slice): a cache's entry replaced at its next write."""


def _on_cpu() -> bool:
    # Asking the default device costs ~3 us, ~20 times a step: only where it can change.
    return not _STATE["gpu"] or mx.default_device() == mx.cpu


def _rms_norm(ext: Any):
    original = _ORIGINAL["rms_norm"]

    def rms_norm(x, weight, eps, *, stream=None):
        if (stream is None and weight is not None and x.dtype == weight.dtype
                and x.dtype in _FLOATS and weight.ndim == 1 and _on_cpu()):
            return ext.rms_norm(x, weight, eps)
        return original(x, weight, eps, stream=stream)
    return rms_norm


def _rope(ext: Any):
    original = _ORIGINAL["rope"]

    def rope(a, dims, *, traditional, base, scale, offset, freqs=None, stream=None):
        if stream is None and a.dtype in _FLOATS and a.ndim >= 3 and _on_cpu():
            if isinstance(offset, int):
                offset = mx.array(offset, dtype=mx.int32)
            if offset.dtype in (mx.int32, mx.int64, mx.uint32) and offset.ndim <= 1:
                return ext.rope(a, dims, traditional, base, scale, offset, freqs)
        return original(a, dims, traditional=traditional, base=base, scale=scale,
                        offset=offset, freqs=freqs, stream=stream)
    return rope


def _sdpa(ext: Any):
    original = _ORIGINAL["scaled_dot_product_attention"]

    def scaled_dot_product_attention(q, k, v, *, scale, mask=None, sinks=None, stream=None,
                                     **kw):
        if (stream is None and sinks is None and not kw and _on_cpu()
                and q.dtype == k.dtype == v.dtype == mx.float32
                and q.ndim == k.ndim == v.ndim == 4 and q.shape[1] % k.shape[1] == 0
                and q.shape[1] // k.shape[1] <= 64):
            keys, values, kv_len = k, v, -1
            folded = _FOLDED.pop(id(k), None)
            if folded is not None and folded[0] is k and folded[1] is v:
                keys, values, kv_len = folded[2:]  # the buffers, not the slices
            if mask is None or isinstance(mask, str):
                if mask in (None, "causal"):
                    return ext.sdpa(q, keys, values, scale, mask or "", kv_len=kv_len)
            elif mask.dtype in (mx.bool_, mx.float32) and mask.ndim <= 4:
                return ext.sdpa(q, keys, values, scale, "", mask, kv_len=kv_len)
        return original(q, k, v, scale=scale, mask=mask, sinks=sinks, stream=stream, **kw)
    return scaled_dot_product_attention


def _kv_update():
    original = _ORIGINAL["update_and_fetch"]

    def update_and_fetch(self, keys, values):
        k, v = original(self, keys, values)
        _FOLDED.pop(_BY_CACHE.pop(id(self), 0), None)  # its last step's, unread
        if (k.dtype == mx.float32 and k.ndim == 4 and k.shape[2] == self.offset
                and self.keys.shape[2] > self.offset and _on_cpu()):  # k: the buffer's first rows
            if len(_FOLDED) > 4096:  # caches gone with their last slices unread
                _FOLDED.clear()
            _FOLDED[id(k)] = (k, v, self.keys, self.values, self.offset)
            _BY_CACHE[id(self)] = id(k)
        return k, v
    return update_and_fetch


def install() -> bool:
    """Route ``mx.fast``'s three ops to the extension and note ``KVCache``'s
    slices (once; a no-op off Linux or without the extension). True when they
    are routed."""
    if _ORIGINAL:
        return True
    ext = native.module() if sys.platform.startswith("linux") else None
    if ext is None or not all(hasattr(ext, n) for n in ("rms_norm", "rope", "sdpa")):
        return False
    _STATE["gpu"] = mx.is_available(mx.gpu)
    _ORIGINAL.update({n: getattr(mx.fast, n) for n in _NAMES})
    _ORIGINAL["update_and_fetch"] = KVCache.update_and_fetch
    mx.fast.rms_norm = _rms_norm(ext)
    mx.fast.rope = _rope(ext)
    mx.fast.scaled_dot_product_attention = _sdpa(ext)
    KVCache.update_and_fetch = _kv_update()
    return True


def uninstall() -> None:
    """Give ``mx.fast`` and ``KVCache`` their own functions back (benchmarks and
    tests compare)."""
    for name, fn in _ORIGINAL.items():
        setattr(KVCache if name == "update_and_fetch" else mx.fast, name, fn)
    _ORIGINAL.clear()
    _FOLDED.clear()
    _BY_CACHE.clear()


def installed() -> bool:
    return bool(_ORIGINAL)


def original(name: str) -> Any:
    """MLX's own ``mx.fast.<name>``, installed or not (the tests' reference)."""
    return _ORIGINAL.get(name) or getattr(mx.fast, name)
