"""Compute-dtype figures for bench/model.py (models/precision.py's policy).

import_ppl_ratio_*: perplexity of the imported model as the loader runs it here
/ the file's values decoded to float32 (``gguf.quants.dequantize``) run in
float32 by mlx-lm, for the bundled file and two files the tests' writer makes
from a tiny Gemma 3 with a massive-activation channel (tests/models/loud_gemma.py).
f16_ppl_ratio_*: the same file computing in float16 instead (nan: it overflowed).
fp32_cost: decode tok/s of the bundled model in float32 / in float16, this CPU.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gguf_figures import float_reference, perplexity  # noqa: E402

from tests.models.prose import PROSE  # noqa: E402


def _bundled(work: Path) -> tuple[dict[str, float], Path]:
    from mlxchat.models.gguf_import import bundled_gguf, convert_gguf
    from mlxchat.models.loader import load_folder

    convert_gguf(bundled_gguf(), work / "bundled")
    ours = load_folder(work / "bundled", available=None)
    ids = ours.tokenizer.encode(PROSE)
    config = json.loads((work / "bundled" / "config.json").read_text())
    reference = perplexity(float_reference(bundled_gguf(), config), ids)
    f16 = load_folder(work / "bundled", available=None, compute_dtype="float16")
    print(f"bundled {bundled_gguf().name}: computes in {ours.info.compute_dtype}, perplexity "
          f"{perplexity(ours.model, ids):.4f}, float32 reference {reference:.4f}")
    return {"import_ppl_ratio_bundled": perplexity(ours.model, ids) / reference,
            "f16_ppl_ratio_bundled": perplexity(f16.model, ids) / reference}, work / "bundled"


def _loud(work: Path) -> dict[str, float]:
    from mlxchat.models.gguf_import import convert_gguf
    from mlxchat.models.loader import load_folder
    from tests.models.loud_gemma import FILES, perplexity as ppl, reference, sampled_ids, \
        write_loud_gemma

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


def _fp32_cost(folder: Path, tokens: int = 24, repeats: int = 3) -> float:
    from common import median, raw_decode_tps

    from mlxchat.models.loader import load_folder

    models = {d: load_folder(folder, available=None, compute_dtype=d)
              for d in ("float32", "float16")}
    ids = models["float32"].tokenizer.encode(PROSE)[:32]
    tps: dict[str, list[float]] = {d: [] for d in models}
    for _ in range(repeats):
        for dtype, loaded in models.items():
            tps[dtype].append(raw_decode_tps(loaded, ids, tokens)[1])
    f32, f16 = median(tps["float32"]), median(tps["float16"])
    print(f"decode tok/s of the bundled model: float32 {f32:.1f}, float16 {f16:.1f}")
    return f32 / f16


def precision_figures() -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="mlxchat-bench-precision-"))
    figures, bundled = _bundled(work)
    figures.update(_loud(work))
    figures["fp32_cost"] = _fp32_cost(bundled)
    return figures
