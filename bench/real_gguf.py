"""A real GGUF file imported, against llama.cpp's own decode of the same file.

    .venv/bin/python bench/real_gguf.py FILE.gguf [--llamacpp-python PYTHON]

For a dense model file downloaded from anywhere (a K-quant mix as llama.cpp's
quantizer writes it, not one the tests wrote). The passage is Python's own
``pydoc`` text of the ``threading`` module, whitespace collapsed: the file's BOS
then its first tokens, 1,023 ids in all, the same ids on every side. The import
is timed; then the perplexity of those ids is measured three ways:

- the imported model (its quantized layers' weights dequantized for the pass:
  the very values ``quantized_matmul`` reads, through the BLAS for speed);
  and, where the native kernel is built, again on its int8 path (the
  activations rounded to int8 per block of 32, as llama.cpp's CPU path does:
  ``cpu_matmul=int8``);
- mlx-lm's float32 model holding ``gguf.quants.dequantize`` of every tensor,
  with llama.cpp's converter's changes undone (Gemma's ``1 + w`` norms, Llama's
  q/k row order): the file's exact values;
- llama.cpp itself (``llama-cpp-python``, ``logits_all``) run by
  ``--llamacpp-python`` (default ``$LLAMACPP_PYTHON``, else this interpreter);
  absent, skipped and said.

Also printed: per GGUF tensor type, what the import made of it and its error
against the file's values. The last line is: ratios: import_ppl_ratio=X
[vs_llamacpp_ppl=X] [int8_ppl_ratio=X (int8 over the float32 import)]
[vs_llamacpp_ppl_int8=X] import_s_per_gb=X perplexity=X (a broken import
reads in the thousands). Mixture-of-experts files are measured by bench/moe_figures.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gguf_figures import float_reference, perplexity, type_errors  # noqa: E402

TOKENS = 1023

LLAMACPP = r"""
import json, math, sys
import numpy as np
from llama_cpp import Llama
path, threads = sys.argv[1], int(sys.argv[2])
ids = json.load(sys.stdin)
llm = Llama(model_path=path, n_ctx=len(ids) + 8, n_batch=512, n_threads=threads,
            logits_all=True, verbose=False)
llm.eval(ids[:-1])
logits = np.asarray(llm.scores[:len(ids) - 1], dtype=np.float64)
top = logits.max(axis=-1)
lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=-1))
nll = lse - logits[np.arange(len(ids) - 1), ids[1:]]
print(json.dumps({"perplexity": math.exp(nll.mean())}))
"""


def passage_ids(tokenizer, n: int = TOKENS) -> list[int]:
    """BOS (where the tokenizer has one), then the first tokens of pydoc's threading text."""
    import pydoc

    text = " ".join(pydoc.render_doc("threading", renderer=pydoc.plaintext).split())
    bos = getattr(tokenizer, "bos_token_id", None)
    head = [bos] if bos is not None else []
    return head + tokenizer.encode(text, add_special_tokens=False)[:n - len(head)]


def llamacpp_perplexity(python: str, path: Path, ids: list[int]) -> float:
    threads = len(os.sched_getaffinity(0))
    out = subprocess.run([python, "-c", LLAMACPP, str(path), str(threads)], input=json.dumps(ids),
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"llama.cpp: {out.stderr.strip()[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["perplexity"]


def imported_perplexity(loaded, ids: list[int], path: str = "dequantized") -> float:
    """The imported model's perplexity, each quantized layer's weight dequantized for
    the pass (exactly what quantized_matmul computes with; the BLAS is faster), or
    on another cpu_matmul ``path`` (``int8``)."""
    from mlxchat.models import cpu_matmul as cm

    for _, layer in cm.quantized_layers(loaded.model):
        cm.set_path(layer, cm.Path(prefill=path, decode=path))
    try:
        return perplexity(loaded.model, ids)
    finally:
        cm.clear(loaded.model)


def print_type_errors(path: Path, folder: Path) -> None:
    print("| GGUF type | tensors | values | imported as | rel. RMS error vs file | "
          "max abs error | values not exact |")
    print("|---|---|---|---|---|---|---|")
    for kind, r in type_errors(path, folder).items():
        print(f"| {kind} | {r['tensors']} | {r['values']:,} | {r['became']} | "
              f"{r['rel_rms']:.2e} | {r['max_abs']:.2e} | {r['inexact']:.1%} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--llamacpp-python", default=os.environ.get("LLAMACPP_PYTHON"))
    args = ap.parse_args()

    from bench.cpu import _llamacpp_python
    from mlxchat.models.gguf.header import read_header
    from mlxchat.models.gguf.arch import ARCHS

    header = read_header(args.file)
    arch = ARCHS.get(header.architecture)
    if arch is None or arch.moe:
        print(f"{args.file.name}: {header.architecture} is not a dense architecture this "
              "bench compares (see bench/moe_figures.py)")
        return 2
    python = _llamacpp_python(args.llamacpp_python)
    work = Path(tempfile.mkdtemp(prefix="mlxchat-real-gguf-"))
    try:
        return measure(args.file, work, python)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the converted folder: as big as the file


def measure(path: Path, work: Path, python: str | None) -> int:
    from mlxchat.models import load_folder
    from mlxchat.models.gguf.header import read_header
    from mlxchat.models.gguf.importer import convert_gguf

    header = read_header(path)
    started = time.perf_counter()
    convert_gguf(path, work / "mlx")
    seconds = time.perf_counter() - started
    print_type_errors(path, work / "mlx")
    loaded = load_folder(work / "mlx")
    config = json.loads((work / "mlx" / "config.json").read_text())
    ids = passage_ids(loaded.tokenizer)
    ours = imported_perplexity(loaded, ids)
    from mlxchat import native

    int8 = imported_perplexity(loaded, ids, "int8") if native.module() is not None else None
    del loaded
    exact = perplexity(float_reference(path, config), ids)
    theirs = llamacpp_perplexity(python, path, ids) if python else None
    size_gb = path.stat().st_size / 1e9
    print(f"{path.name}: {header.architecture}, {size_gb * 1e3:.0f} MB, imported in "
          f"{seconds:.1f} s; perplexity over {len(ids)} tokens of pydoc's threading text: "
          f"imported {ours:.3f}, float32 decode of the file {exact:.3f}, llama.cpp "
          + (f"{theirs:.3f}" if theirs else
             "skipped (llama-cpp-python not importable: --llamacpp-python)")
          + (f"; imported on the int8 kernel {int8:.3f}" if int8 else ""))
    vs = f" vs_llamacpp_ppl={ours / theirs:.4f}" if theirs else ""
    if int8:
        vs += f" int8_ppl_ratio={int8 / ours:.4f}"
        vs += f" vs_llamacpp_ppl_int8={int8 / theirs:.4f}" if theirs else ""
    print(f"ratios: import_ppl_ratio={ours / exact:.4f}{vs} import_s_per_gb="
          f"{seconds / size_gb:.1f} perplexity={ours:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
