"""Model benchmark: prefill and decode tokens/s of `mlxchat ask`'s code path
(the composition root: load_model, ChatEngine and a throwaway session's
conv.turns.send) against raw mlx_lm.load + stream_generate on the
same converted folder, in the same run, alternating.

    .venv/bin/python bench/model.py [--model smollm2-135m] [--tokens 32] [--repeats 3]
    .venv/bin/python bench/model.py --import-only      # just the GGUF import figures

Then it imports a Q4_K GGUF made from the bundled weights (bench/gguf_figures.py).
The last line is: ratios: prefill=X decode=X import_ppl_ratio=X import_s_per_gb=X
(prefill/decode: mlxchat / raw, target >= 0.97; import_ppl_ratio: perplexity of the
imported Q4_K model / the same weights dequantized to float32, target <= 1.01), then
the compute-dtype figures (bench/precision_figures.py): import_ppl_ratio_bundled,
_q4_k and _q5_0 (target <= 1.01), f16_ppl_ratio_* (the same files in float16) and
fp32_cost (decode tok/s float32 / float16 here), then the mixture-of-experts figures
(bench/moe_figures.py): import_ppl_ratio_qwen3moe (a Q4_K_M-like tiny qwen3moe),
_qwen3moe_q4_k (the same all Q4_K) and _gptoss (MXFP4 experts), target <= 1.01
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

from common import median, raw_decode_tps  # noqa: E402

from mlxchat.config import Settings  # noqa: E402
from mlxchat.engine.events import TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.session.root import open_conversation, throwaway_store  # noqa: E402

PROMPT = ("Write a long, detailed story about a lighthouse keeper who finds a message in a "
          "bottle, describing the sea, the weather and the town nearby.")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=32, help="tokens to decode per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--import-only", action="store_true", help="only the GGUF import figures")
    args = ap.parse_args()
    from gguf_figures import import_figures
    from moe_figures import moe_figures
    from precision_figures import precision_figures

    figures = {**import_figures(), **precision_figures(), **moe_figures()}
    imported = " ".join(f"{k}={v:.3f}" for k, v in figures.items())
    if args.import_only:
        print(f"ratios: {imported}")
        return 0

    from mlx_lm import load as mlx_lm_load

    from mlxchat.models import load_model, resolve_folder

    t0 = time.perf_counter()
    ours = load_model(args.model)
    load_ours = time.perf_counter() - t0
    folder = resolve_folder(args.model)
    t0 = time.perf_counter()
    model, tokenizer = mlx_lm_load(str(folder))
    load_raw = time.perf_counter() - t0
    raw = SimpleNamespace(model=model, tokenizer=tokenizer)
    info = ours.info
    print(f"model: {info.name} from {folder}")
    print(f"  {info.quantization}, scales {info.scales_dtype}, {info.bits_per_weight:.2f} "
          f"bits/weight, {info.weights_bytes / 1e6:.1f} MB, {info.device}")
    print(f"load: mlxchat {load_ours:.2f} s  mlx_lm.load {load_raw:.2f} s")

    ids = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                        add_generation_prompt=True)
    greedy = GenerationSettings(temperature=0.0, max_tokens=args.tokens)
    r_pre, r_dec, o_pre, o_dec, gen = [], [], [], [], []
    for i in range(2 * args.repeats):
        if i % 2 == (i // 2) % 2:  # alternate which goes first
            p, d = raw_decode_tps(raw, ids, args.tokens)
            r_pre.append(p)
            r_dec.append(d)
        else:
            conv = open_conversation(Settings(generation=greedy),
                                     store_factory=throwaway_store, keep_snapshots=False,
                                     load_model=lambda spec, progress=None: ours).conversation
            done = [e for e in conv.turns.send(PROMPT) if isinstance(e, TurnDone)][0]
            conv.shutdown()
            o_pre.append(done.stats.prefill_tps)
            o_dec.append(done.stats.decode_tps)
            gen.append(done.stats.generated_tokens)
    print(f"prompt {len(ids)} tokens, decoded up to {args.tokens} (mlxchat made {gen})")
    print(f"prefill tok/s: mlxchat {median(o_pre):.2f}  raw {median(r_pre):.2f}")
    print(f"decode tok/s:  mlxchat {median(o_dec):.2f}  raw {median(r_dec):.2f}")
    print(f"ratios: prefill={median(o_pre) / median(r_pre):.3f} "
          f"decode={median(o_dec) / median(r_dec):.3f} {imported}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
