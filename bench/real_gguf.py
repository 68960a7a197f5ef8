"""A real GGUF file imported, against llama.cpp's own decode of the same file.

    .venv/bin/python bench/real_gguf.py FILE.gguf

For a dense model file downloaded from anywhere (a K-quant mix as llama.cpp's
quantizer writes it, not one the tests wrote): the import is timed, then the
perplexity of an English passage is measured on the imported model and on
mlx-lm's float32 model holding ``gguf.quants.dequantize`` of every tensor,
with llama.cpp's converter's changes undone (Gemma's ``1 + w`` norms, Llama's
q/k row order). The last line is: ratios: import_ppl_ratio=X import_s_per_gb=X
(and the perplexity itself: a broken import reads in the thousands).
Mixture-of-experts files are measured by bench/moe_figures.py instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gguf_figures import float_reference, perplexity  # noqa: E402

from tests.models.prose import PROSE  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    args = ap.parse_args()

    from mlxchat.models import load_folder
    from mlxchat.models.gguf import read_header
    from mlxchat.models.gguf_arch import ARCHS
    from mlxchat.models.gguf_import import convert_gguf

    header = read_header(args.file)
    arch = ARCHS.get(header.architecture)
    if arch is None or arch.moe:
        print(f"{args.file.name}: {header.architecture} is not a dense architecture this "
              "bench compares (see bench/moe_figures.py)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="mlxchat-real-gguf-"))
    started = time.perf_counter()
    convert_gguf(args.file, work / "mlx")
    seconds = time.perf_counter() - started
    loaded = load_folder(work / "mlx")
    config = json.loads((work / "mlx" / "config.json").read_text())
    ids = loaded.tokenizer.encode(PROSE)
    ours = perplexity(loaded.model, ids)
    theirs = perplexity(float_reference(args.file, config), ids)
    size_gb = args.file.stat().st_size / 1e9
    print(f"{args.file.name}: {header.architecture}, {size_gb * 1e3:.0f} MB, imported in "
          f"{seconds:.1f} s; perplexity over {len(ids)} tokens of English prose: imported "
          f"{ours:.3f}, float32 decode of the file {theirs:.3f}")
    print(f"ratios: import_ppl_ratio={ours / theirs:.4f} import_s_per_gb={seconds / size_gb:.1f} "
          f"perplexity={ours:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
