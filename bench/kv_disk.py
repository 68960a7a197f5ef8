"""The KV cache on disk at 8B scale: what a turn's save costs as the history
grows, how fast a long history is restored (from one file per turn, and from
the one file a join makes of them, against MLX's own ``mx.load`` of the same
file into new arrays), what joining 16 segments costs, what branches cost on
disk; and what one turn writes on a Gemma-3-shaped cache, whose sliding-window
layers write only the rows the turn changed.

Used by bench/engine.py, or alone: ``python bench/kv_disk.py [--quick]``. Real
arrays shaped like Llama-3-8B's cache (32 layers, 8 KV heads, head_dim 128,
fp16) and Gemma 3 270M's (18 layers, every sixth full attention, the others a
512-token window, one KV head of 256) through the real segment writer and reader.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import KVCache, RotatingKVCache

from mlxchat.engine.disk import branch_restore, joiner, segments

LAYERS, KV_HEADS, HEAD_DIM = 32, 8, 128
PER_TOKEN = LAYERS * 2 * KV_HEADS * HEAD_DIM * 2  # bytes of fp16 K and V


class _Model:
    """What a restore needs of a model: its cache layout."""

    def make_cache(self) -> list[KVCache]:
        return [KVCache() for _ in range(LAYERS)]


def cache_of(tokens: int) -> list[KVCache]:
    layers = []
    for _ in range(LAYERS):
        c = KVCache()
        k = mx.random.normal((1, KV_HEADS, tokens, HEAD_DIM)).astype(mx.float16)
        c.update_and_fetch(k, k)
        layers.append(c)
    mx.eval([c.state for c in layers])
    return layers


def save_turn(folder: Path, layers: list[KVCache], history: int, new: int = 64
              ) -> tuple[float, int]:
    """Seconds and bytes to save one turn of ``new`` tokens after ``history``."""
    path = folder / f"turn-{history}.safetensors"
    t0 = time.perf_counter()
    info = segments.write(path, layers, history, history + new, [0] * new,
                          fingerprint="bench", template_hash="bench")
    return time.perf_counter() - t0, info.bytes


def write_history(folder: Path, layers: list[KVCache], tokens: int, per_segment: int
                  ) -> list[segments.SegmentRef]:
    refs = []
    for start in range(0, tokens, per_segment):
        end = min(tokens, start + per_segment)
        path = folder / f"hist-{start}.safetensors"
        info = segments.write(path, layers, start, end, [0] * (end - start),
                              fingerprint="bench", template_hash="bench")
        refs.append(segments.SegmentRef(path, start, end, info.checksum, [0] * (end - start)))
    return refs


def restore_s(refs: list[segments.SegmentRef]) -> float:
    """Seconds the engine's restore takes (checksums overlapped with the reads)."""
    t0 = time.perf_counter()
    got = branch_restore.restore(_Model(), refs, fingerprint="bench", template_hash="bench")
    assert got.reason is None, got.reason
    return time.perf_counter() - t0


def compact(folder: Path, refs: list[segments.SegmentRef]
            ) -> tuple[float, list[segments.SegmentRef]]:
    """Seconds to join ``refs`` into one file, and the references into it."""
    t0 = time.perf_counter()
    info = joiner.compact([[r] for r in refs], folder / "joined.safetensors")
    seconds = time.perf_counter() - t0
    return seconds, [segments.SegmentRef(Path(info.path), r.start, r.end, info.checksum,
                                         r.token_ids) for r in refs]


def fresh_memory_s(tokens: int) -> float:
    """Seconds to allocate and first touch arrays the size of a restored cache:
    what a restore into new memory pays beyond reading (page faults)."""
    t0 = time.perf_counter()
    arrays = [mx.zeros((1, KV_HEADS, tokens, HEAD_DIM), dtype=mx.float16)
              for _ in range(2 * LAYERS)]
    mx.eval(arrays)
    seconds = time.perf_counter() - t0
    del arrays
    return seconds


def mlx_load_s(path: Path) -> float:
    """Seconds MLX's own loader takes to read a file's arrays into new memory:
    what reading the same bytes into fresh MLX arrays costs without our checks."""
    t0 = time.perf_counter()
    arrays = mx.load(str(path))
    mx.eval(list(arrays.values()))
    seconds = time.perf_counter() - t0
    del arrays
    return seconds


def plain_read_s(refs: list[segments.SegmentRef]) -> float:
    t0 = time.perf_counter()
    for r in refs:
        with open(r.path, "rb") as fh:
            while fh.read(8 << 20):
                pass
    return time.perf_counter() - t0


def measure(*, long: int, short: int, branch_history: int) -> dict[str, float]:
    """The ratios; ``long``/``short`` are the two history lengths compared."""
    folder = Path(tempfile.mkdtemp(prefix="mlxchat-kv-"))
    try:
        layers = cache_of(short + 64)
        short_s, _ = min(save_turn(folder, layers, short) for _ in range(3))
        layers = cache_of(long + 64)
        long_s, long_bytes = min(save_turn(folder, layers, long) for _ in range(3))
        print(f"save one 64-token turn: after {short:,} tokens {short_s * 1000:.1f} ms, after "
              f"{long:,} tokens {long_s * 1000:.1f} ms ({long_bytes / 1e6:.2f} MB written; "
              f"KV {PER_TOKEN * 64 / 1e6:.2f} MB)")
        refs = write_history(folder, layers, long, long // 16)
        del layers
        mx.clear_cache()
        restore, plain = [], []
        for _ in range(2):
            plain.append(plain_read_s(refs))
            mx.clear_cache()
            restore.append(restore_s(refs))
        size = sum(r.path.stat().st_size for r in refs)
        fresh = fresh_memory_s(long)
        print(f"restore {long:,} tokens ({size / 1e9:.2f} GB in {len(refs)} segments): "
              f"{min(restore):.2f} s (first {restore[0]:.2f} s); plain read of the same files "
              f"{min(plain):.2f} s; allocating and zeroing fresh arrays of that size "
              f"{fresh:.2f} s")
        compact_s, joined = compact(folder, refs)
        for r in refs:
            r.path.unlink()
        joined_restore, joined_plain, loads = [], [], []
        for _ in range(4):  # each into new memory: MLX's cache handed back first
            joined_plain.append(plain_read_s(joined[:1]))
            mx.clear_cache()
            joined_restore.append(restore_s(joined))
            mx.clear_cache()
            loads.append(mlx_load_s(joined[0].path))
        mx.clear_cache()
        print(f"join the {len(refs)} segments into one file: {compact_s:.2f} s; restore from "
              f"it {min(joined_restore):.2f} s ({', '.join(f'{x:.2f}' for x in joined_restore)}), "
              f"plain read {min(joined_plain):.2f} s, mx.load of it into new arrays "
              f"{min(loads):.2f} s ({', '.join(f'{x:.2f}' for x in loads)})")
        for f in folder.iterdir():
            f.unlink()
        branch_ratio = branch_storage(folder, branch_history)
        for f in folder.iterdir():
            f.unlink()
        sliding = sliding_turn(folder, 2048)
    finally:
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    return {"save_growth": long_s / short_s, "save_bytes_ratio": long_bytes / (64 * PER_TOKEN),
            "resume_read_ratio": min(restore) / min(plain),
            "joined_read_ratio": min(joined_restore) / min(joined_plain),
            "compact_s": compact_s, "fresh_memory_s": fresh,
            "restore_load_ratio": min(joined_restore) / min(loads),
            "branch_storage_ratio": branch_ratio, **sliding}


def branch_storage(folder: Path, history: int) -> float:
    """Disk bytes of three branches off one history / the longest branch alone,
    through the real store bookkeeping (branches share their parent's segments)."""
    from mlxchat.store import open_store

    store = open_store(folder / "s.db")
    sid = store.create_session("bench").id
    trunk = store.add_message(sid, "user", "history")
    layers = cache_of(history + 3 * 64)
    info = segments.write(folder / "trunk.safetensors", layers, 0, history, [0] * history,
                          fingerprint="bench", template_hash="bench")
    store.segments.record(sid, trunk.id, start=0, end=history, path="trunk.safetensors",
                          checksum=info.checksum, file_bytes=info.bytes, kv_bits=None,
                          token_ids=[0] * history)
    leaves = []
    for b in range(3):  # three replies to the same history: three branches
        reply = store.add_message(sid, "assistant", f"reply {b}", parent_id=trunk.id)
        name = f"branch-{b}.safetensors"
        binfo = segments.write(folder / name, layers, history, history + 64, [0] * 64,
                               fingerprint="bench", template_hash="bench")
        store.segments.record(sid, reply.id, start=history, end=history + 64, path=name,
                              checksum=binfo.checksum, file_bytes=binfo.bytes, kv_bits=None,
                              token_ids=[0] * 64)
        leaves.append(reply.id)
    session = store.segments.session_bytes(sid)
    longest = max(sum(r.file_bytes for r in store.segments.on_branch(leaf)) for leaf in leaves)
    store.close()
    print(f"three branches off {history:,} tokens: {session / 1e6:.1f} MB on disk; "
          f"one branch alone {longest / 1e6:.1f} MB")
    return session / longest


# -- a Gemma-3-shaped cache: what one turn writes ---------------------------------------

G_LAYERS, G_FULL_EVERY, G_WINDOW, G_HEAD_DIM = 18, 6, 512, 256


class _GemmaModel:
    def make_cache(self) -> list:
        return [KVCache() if (i + 1) % G_FULL_EVERY == 0 else RotatingKVCache(G_WINDOW)
                for i in range(G_LAYERS)]


def _feed(cache: list, n: int, seed: int) -> None:
    """``n`` positions into every layer: one chunk (mlx-lm's prefill path), or a
    token at a time (the decode path, which wraps a window in place)."""
    k = mx.random.normal((1, 1, n, G_HEAD_DIM), key=mx.random.key(seed)).astype(mx.float16)
    for c in cache:
        c.update_and_fetch(k, k)
    mx.eval([c.state for c in cache])


def sliding_turn(folder: Path, history: int, turn: int = 64) -> dict[str, float]:
    """Bytes one ``turn``-token turn (prompt in one chunk, reply a token at a
    time) writes after ``history`` tokens, against its full layers' 64 tokens
    plus the window rows it changed; and the turn's files restored exactly."""
    model = _GemmaModel()
    cache = model.make_cache()
    refs = []
    for n, start in enumerate(range(0, history, 512)):
        _feed(cache, min(512, history - start), n)
        end = min(history, start + 512)
        info = segments.write(folder / f"g-{start}.safetensors", cache, start, end,
                              [0] * (end - start), fingerprint="bench", template_hash="bench")
        refs.append(segments.SegmentRef(folder / f"g-{start}.safetensors", start, end,
                                        info.checksum, [0] * (end - start)))
    _feed(cache, turn - 16, 99)
    for t in range(16):
        _feed(cache, 1, 100 + t)
    end = history + turn
    t0 = time.perf_counter()
    info = segments.write(folder / "g-turn.safetensors", cache, history, end, [0] * turn,
                          fingerprint="bench", template_hash="bench")
    write_s = time.perf_counter() - t0
    refs.append(segments.SegmentRef(folder / "g-turn.safetensors", history, end,
                                    info.checksum, [0] * turn))
    position = 2 * G_HEAD_DIM * 2  # fp16 keys and values of one KV head
    full = sum(isinstance(c, KVCache) for c in cache)
    windows = [c for c in cache if isinstance(c, RotatingKVCache)]
    changed = sum(min(turn, c.keys.shape[-2]) for c in windows)
    needed = turn * full * position + changed * position
    whole = turn * full * position + sum(c.keys.nbytes + c.values.nbytes for c in windows)
    got = branch_restore.restore(model, refs, fingerprint="bench", template_hash="bench")
    assert got.reason is None and got.end == end, got.reason
    exact = all(mx.array_equal(a.keys, b.keys).item() and a.offset == b.offset
                for a, b in zip(got.layers, cache))
    print(f"Gemma-3-shaped turn of {turn} tokens after {history:,}: {info.bytes / 1e6:.3f} MB "
          f"written in {write_s * 1000:.1f} ms; its {full} full layers' tokens plus the "
          f"{changed:,} window rows it changed are {needed / 1e6:.3f} MB; the whole windows "
          f"with them (segment format 1) {whole / 1e6:.2f} MB; restored exactly: {exact}")
    assert exact
    return {"sliding_turn_write_ratio": info.bytes / needed,
            "sliding_turn_vs_whole_window": info.bytes / whole}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4k tokens instead of 16k")
    args = ap.parse_args()
    long, short, branch = (4096, 256, 1024) if args.quick else (16384, 1024, 4096)
    figures = measure(long=long, short=short, branch_history=branch)
    print("ratios: " + " ".join(f"{k}={v:.3f}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
