"""Engine benchmark: overhead vs raw mlx-lm, follow-up and resume speed-ups,
snapshot size and 4-bit KV savings, all measured in one run.

    .venv/bin/python bench/engine.py [--quick] [--model small-llama|SPEC] [--overhead-only]

With --overhead-only the last line is: ratios: overhead=X
engine_overhead_ms_per_token=X (the engine's wall time per decoded token
above mlx-lm's stream_generate, first token to last as a caller sees them,
medians of alternating runs; goal <= 0.1) engine_overhead_cpu_ms_per_token=X
(the same in process CPU time) engine_speed_share=X (raw / engine time per
token) load=X (see engine_overhead.py).

The last line is: ratios: overhead=X followup_speedup=X resume_speedup=X
snapshot_size_ratio=X kv4_bytes_ratio=X save_growth=X save_bytes_ratio=X
resume_read_ratio=X joined_read_ratio=X compact_s=X branch_storage_ratio=X (these on
an 8B-shaped cache: restore from 16 segment files, and from the one file joining
them, over a plain read of the same files; seconds to join the 16; the seconds of
fresh memory of that size; restore from the joined file over mx.load of it)
typing_ttft_ratio=X (TTFT of a ~60-token message typed at 5 chars/s with prefill
while typing / without, after a ~1000-token warm history) spec_accept=X (share
of proposals accepted with the model as its own draft) spec_speed=X (decode
tok/s with prompt lookup / plain, see speculation.py)
pinned_ttft_ratio=X pinned_recompute_ratio=X (TTFT of the first message of a new
session pinning a ~2,000-token document already in the prefix store / without
the document; and with the document's KV computed instead)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import engine_overhead  # noqa: E402
import kv_disk  # noqa: E402
import pinned  # noqa: E402
import speculation  # noqa: E402
import typing_ahead  # noqa: E402
from common import median, pick_model, raw_decode_tps  # noqa: E402

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.disk.segments import SegmentRef
from mlxchat.engine.events import TurnDone
from mlxchat.engine.prompt.render import render
from mlxchat.generation import GenerationSettings

FILLER = ("The history of the region is long and varied, shaped by rivers, trade routes, "
          "harvests and the people who settled along the coast over many centuries. ")


def rendered_len(tokenizer, msgs: list[Message]) -> int:
    return len(render(tokenizer, msgs))


def history(tokenizer, target: int) -> list[Message]:
    """A conversation whose rendered prompt is just over ``target`` tokens."""
    msgs = [Message("system", "You are a patient historian.")]
    words = FILLER.split()
    i = 0
    while rendered_len(tokenizer, msgs) < target:
        role = "user" if len(msgs) % 2 else "assistant"
        text = " ".join(words[: 4 + (i % len(words))])
        msgs.append(Message(role, text))
        i += 1
    if msgs[-1].role == "user":
        msgs.append(Message("assistant", "Yes."))
    return msgs


def follow_up_text(tokenizer, base: list[Message], lead: str, target: int = 32) -> str:
    """A user message that adds about ``target`` prompt tokens after ``base``."""
    words = ["tell", "me", "more", "about", "the", "rivers", "and", "harvests"]
    text, i = lead, 0
    while rendered_len(tokenizer, base + [Message("user", text)]) - \
            rendered_len(tokenizer, base) < target:
        text += " " + words[i % len(words)]
        i += 1
    return text


def turn(engine: ChatEngine, msgs, settings) -> TurnDone:
    return [e for e in engine.turn(msgs, settings) if isinstance(e, TurnDone)][0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small model, fewer repeats (<1 min)")
    ap.add_argument("--model", default=None, help="small-llama (default with --quick) or a spec")
    ap.add_argument("--overhead-only", action="store_true",
                    help="only the engine's decode over raw mlx_lm (alternating), then stop")
    ap.add_argument("--disk-only", action="store_true",
                    help="only the 8B-shaped KV-on-disk figures (16k tokens; 4k with --quick)")
    args = ap.parse_args()
    long, short, branch = (4096, 256, 1024) if args.quick else (16384, 1024, 4096)
    if args.disk_only:
        disk = kv_disk.measure(long=long, short=short, branch_history=branch)
        print("ratios: " + " ".join(f"{k}={v:.3f}" for k, v in disk.items()))
        return 0
    model_name = args.model or ("small-llama" if args.quick else "smollm2-135m")
    repeats = 2 if args.quick else 3
    decode_tokens = 48 if args.quick else 96
    loaded = pick_model(model_name)
    tok = loaded.tokenizer
    print(f"model: {loaded.info.name} ({loaded.info.quantization}, scales "
          f"{loaded.info.scales_dtype}, {loaded.info.device})")

    # 1. Decode overhead: engine vs raw stream_generate, same prompt, alternating.
    # Plain decoding throughout (speculation has its own figures below).
    greedy = GenerationSettings(temperature=0.0, max_tokens=decode_tokens, speculative="off")
    prompt_msgs = [Message("user", "Tell me a long story about a lighthouse keeper.")]
    ids = tok.apply_chat_template([{"role": "user", "content": prompt_msgs[0].content}],
                                  add_generation_prompt=True)
    # One turn first: it puts the quantized layers on this CPU's paths (cpu_matmul),
    # which raw mlx_lm then shares; else the first raw runs would be on the old ones.
    warm = ChatEngine(loaded)
    turn(warm, prompt_msgs, greedy)
    warm.close()
    raw, ours = [], []
    for i in range(2 * repeats):
        if i % 2 == (i // 2) % 2:  # alternate which goes first
            raw.append(raw_decode_tps(loaded, ids, decode_tokens)[1])
        else:
            eng = ChatEngine(loaded)
            ours.append(turn(eng, prompt_msgs, greedy).stats.decode_tps)
            eng.close()
    overhead = median(ours) / median(raw)
    print(f"decode tok/s: engine {median(ours):.1f}  raw mlx_lm {median(raw):.1f}")
    if args.overhead_only:
        per_token = engine_overhead.measure(loaded, repeats=5 if args.quick else 9)
        print(f"ratios: overhead={overhead:.3f} "
              + " ".join(f"{k}={v:.3f}" for k, v in per_token.items())
              + f" load={os.getloadavg()[0]:.2f}")
        return 0

    # 2. A ~32-token follow-up after a ~1024-token history: recomputed from
    # scratch in a fresh engine vs answered from the warm cache.
    hist = history(tok, 1000)
    brief = GenerationSettings(temperature=0.0, max_tokens=4, speculative="off")
    warm_eng = ChatEngine(loaded)
    first = turn(warm_eng, hist, brief)
    base = hist + [Message("assistant", first.reply)]
    snap_dir = Path(tempfile.mkdtemp(prefix="mlxchat-bench-"))
    # The resume path of a saved session: its KV segments, read back and joined.
    snap = warm_eng.save_segment(snap_dir / "hist.safetensors", 0)
    snap_refs = [SegmentRef(Path(snap.path), 0, snap.end, snap.checksum,
                            warm_eng.cached_tokens)]
    live_kv = warm_eng.state().kv_bytes

    leads = ["Now", "Please", "Also", "Then", "Next"]

    def follow_up(k: int) -> list[Message]:
        return base + [Message("user", follow_up_text(tok, base, leads[k % len(leads)]))]

    cold, warm, resumed, loads = [], [], [], []
    for k in range(repeats):
        eng = ChatEngine(loaded)
        c = turn(eng, follow_up(k), brief).stats
        cold.append(c.ttft_s)
        eng.close()
        # Each repeat asks a different follow-up; the cache trims back to `base`.
        w = turn(warm_eng, follow_up(k), brief).stats
        warm.append(w.ttft_s)
        eng = ChatEngine(loaded)
        t0 = time.perf_counter()
        assert eng.load_segments(snap_refs, conversation=base).ok
        loads.append(time.perf_counter() - t0)
        r = turn(eng, follow_up(k), brief).stats
        assert r.cache_source == "snapshot", r
        resumed.append(loads[-1] + r.ttft_s)
        eng.close()
    print(f"history {first.stats.context_used} tokens; follow-up prefills: warm "
          f"{w.prefilled_tokens}, resumed {r.prefilled_tokens}, cold {c.prefilled_tokens}")
    print(f"follow-up ttft: cold {median(cold):.3f} s  warm {median(warm):.4f} s  "
          f"resumed {median(resumed):.4f} s (snapshot load {median(loads) * 1000:.1f} ms)")
    print(f"snapshot file {snap.bytes / 1e6:.2f} MB, live KV {live_kv / 1e6:.2f} MB")

    # 4. 4-bit KV cache on the same history.
    q_eng = ChatEngine(loaded)
    q = turn(q_eng, hist, GenerationSettings(temperature=0.0, max_tokens=4, kv_bits=4,
                                                speculative="off"))
    plain_bytes = first.stats.kv_bytes
    print(f"kv bytes: unquantized {plain_bytes / 1e6:.2f} MB  4-bit {q.stats.kv_bytes / 1e6:.2f} MB"
          f" ({first.stats.context_used} vs {q.stats.context_used} tokens)")
    q_eng.close()
    warm_eng.close()
    typing = typing_ahead.measure(loaded)
    spec = speculation.measure(loaded, tokens=decode_tokens, repeats=repeats)
    pins = pinned.measure(loaded, repeats=repeats)
    for f in snap_dir.iterdir():
        os.unlink(f)

    # 5. The KV cache on disk at 8B scale.
    disk = kv_disk.measure(long=long, short=short, branch_history=branch)

    print(f"ratios: overhead={overhead:.3f} followup_speedup={median(cold) / median(warm):.1f} "
          f"resume_speedup={median(cold) / median(resumed):.1f} "
          f"snapshot_size_ratio={snap.bytes / live_kv:.3f} "
          f"kv4_bytes_ratio={q.stats.kv_bytes / plain_bytes:.3f} "
          + " ".join(f"{k}={v:.3f}" for k, v in {**disk, **typing, **spec, **pins}.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
