"""Compute-dtype figures for bench/model.py (models/precision.py's policy).

import_ppl_ratio_*: perplexity of the imported model as the loader runs it here
/ the file's values decoded to float32 (``gguf.quants.dequantize``) run in
float32 by mlx-lm, for the bundled file and two files the tests' writer makes
from a tiny Gemma 3 with a massive-activation channel (tests/models/loud_gemma.py).
f16_ppl_ratio_*: the tiny Gemma files computing in float16 instead (nan: it overflowed).
fp32_cost: decode tok/s of the bundled model in float32 / in float16, this CPU.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gguf_figures import float_reference, perplexity  # noqa: E402

from tests.models.prose import PROSE  # noqa: E402


def _bundled(work: Path) -> tuple[dict[str, float], Path]:
    from mlxchat.models import bundled_gguf, load_folder
    from mlxchat.models.gguf.importer import convert_gguf

    convert_gguf(bundled_gguf(), work / "bundled")
    ours = load_folder(work / "bundled", available=None)
    ids = ours.tokenizer.encode(PROSE)
    config = json.loads((work / "bundled" / "config.json").read_text())
    reference = perplexity(float_reference(bundled_gguf(), config), ids)
    ppl = perplexity(ours.model, ids)
    print(f"bundled {bundled_gguf().name}: computes in {ours.info.compute_dtype}, perplexity "
          f"{ppl:.4f}, float32 reference {reference:.4f}")
    return {"import_ppl_ratio_bundled": ppl / reference}, work / "bundled"


def _loud(work: Path) -> dict[str, float]:
    from mlxchat.models import load_folder
    from mlxchat.models.gguf.importer import convert_gguf

    from tests.models.loud_gemma import FILES, reference, sampled_ids, write_loud_gemma
    from tests.models.loud_gemma import perplexity as ppl

    out = {}
    for mix in FILES:
        tag = mix.split("/")[0].lower()
        path = work / f"gemma-{tag}.gguf"
        held = write_loud_gemma(path, mix)
        convert_gguf(path, work / tag)
        ref_model = reference(held)
        ids = sampled_ids(ref_model)
        ref = ppl(ref_model, ids)
        ours = load_folder(work / tag, available=None)
        figures = {dtype: ppl(load_folder(work / tag, available=None, compute_dtype=dtype).model,
                              ids) / ref for dtype in ("float16", "bfloat16")}
        out[f"import_ppl_ratio_{tag}"] = ppl(ours.model, ids) / ref
        out[f"f16_ppl_ratio_{tag}"] = figures["float16"]
        print(f"tiny gemma3 {mix}: computes in {ours.info.compute_dtype}, perplexity ratio "
              f"{out[f'import_ppl_ratio_{tag}']:.4f}; in float16 {figures['float16']:.4f}, "
              f"in bfloat16 {figures['bfloat16']:.4f} (reference {ref:.3f})")
    return out


def _decode_tps(model, steps: int) -> float:
    """Single-token steps per second after a one-token prompt (a decode step)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([[1]]), cache=cache))
    start = time.perf_counter()
    for i in range(steps):
        mx.eval(model(mx.array([[2 + i]]), cache=cache))
    return steps / (time.perf_counter() - start)


def _fp32_cost(folder: Path, steps: int = 3) -> float:
    """Decode tok/s float32 / float16 of the bundled model. Timed as bare decode
    steps: float16 prefill on this CPU backend is too slow for a full turn."""
    from mlxchat.models import load_folder

    tps = {d: _decode_tps(load_folder(folder, available=None, compute_dtype=d).model, steps)
           for d in ("float32", "float16")}
    print(f"decode tok/s of the bundled model: float32 {tps['float32']:.2f}, "
          f"float16 {tps['float16']:.2f}")
    return tps["float32"] / tps["float16"]


def precision_figures() -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="mlxchat-bench-precision-"))
    figures, bundled = _bundled(work)
    figures.update(_loud(work))
    figures["fp32_cost"] = _fp32_cost(bundled)
    return figures
