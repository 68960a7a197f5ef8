"""Import figures for bench/model.py: a Q4_K file made from the bundled SmolLM2
weights, imported, against the same weights dequantized to float32.

SmolLM2's hidden size (576) is not a multiple of the 256-value K-quant block, so,
as llama.cpp does for such rows, only the tensors whose rows fit (every
ffn_down, 1536 columns) become Q4_K; the rest keep their Q4_1/Q8_0 blocks.
The reference model is built from ``gguf.quants.dequantize`` of every tensor
in that file (llama.cpp's decode), not from our import.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.models.prose import PROSE  # noqa: E402


def write_k_file(source: Path, out: Path, kind: str = "Q4_K") -> int:
    """Copy GGUF ``source`` to ``out`` with every 256-aligned 2-D tensor re-encoded as
    ``kind``; returns how many tensors were re-encoded."""
    import gguf
    import numpy as np

    from tests.models.kquants import encode_blocks

    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(out, str(reader.fields["general.architecture"].contents()))
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, f.contents(), f.types[0], sub_type=sub)
    changed = 0
    for t in reader.tensors:
        rows_cols = tuple(int(d) for d in reversed(t.shape.tolist()))
        if len(rows_cols) == 2 and rows_cols[1] % 256 == 0:
            values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
            raw = encode_blocks(values.reshape(rows_cols), kind)
            writer.add_tensor(t.name, raw, raw_dtype=gguf.GGMLQuantizationType[kind])
            changed += 1
        elif t.tensor_type == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(t.name, np.asarray(t.data))
        else:
            writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return changed


def float_reference(path: Path, config: dict):
    """mlx-lm's float32 model of ``config``'s type holding llama.cpp's decode of
    every tensor in ``path``, with the converter's changes undone (Llama's q/k
    row order, Gemma's ``1 + w`` norms)."""
    import importlib

    import mlx.core as mx

    from mlxchat.models.gguf.header import read_header
    from mlxchat.models.gguf.arch import ARCHS, mlx_name, row_heads, unpermute
    from mlxchat.models.gguf.quants import dequantized

    header = read_header(path)
    arch = ARCHS[header.architecture]
    weights = {}
    for t in header.tensors:
        name = mlx_name(arch, t.name)
        if name is None:
            continue
        values = dequantized(t)
        heads = row_heads(arch, header, t.name)
        if heads:
            values = unpermute(values, heads)
        if arch.norm_shift and t.name.endswith("norm.weight"):
            values = values - arch.norm_shift
        weights[name] = mx.array(values)
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    args = {k: v for k, v in config.items() if not k.startswith("quantization")}
    model = module.Model(module.ModelArgs.from_dict(args))
    if hasattr(model, "sanitize"):  # as mlx-lm's loader does (a tied head, for one)
        weights = model.sanitize(weights)
    model.load_weights(list(weights.items()))
    return model


def perplexity(model, ids: list[int]) -> float:
    import mlx.core as mx
    import mlx.nn as nn

    tokens = mx.array(ids)[None]
    logits = model(tokens[:, :-1]).astype(mx.float32)
    return math.exp(nn.losses.cross_entropy(logits, tokens[:, 1:]).mean().item())


def import_figures(kind: str = "Q4_K") -> dict[str, float]:
    """Write the K file, import it (timed), and measure both perplexities."""
    import json

    from mlxchat.models import bundled_gguf, load_folder
    from mlxchat.models.gguf.importer import convert_gguf

    work = Path(tempfile.mkdtemp(prefix="mlxchat-bench-gguf-"))
    k_file = work / f"smollm2-{kind}.gguf"
    changed = write_k_file(bundled_gguf(), k_file, kind)
    started = time.perf_counter()
    convert_gguf(k_file, work / "mlx")
    seconds = time.perf_counter() - started
    loaded = load_folder(work / "mlx")
    ids = loaded.tokenizer.encode(PROSE)
    config = json.loads((work / "mlx" / "config.json").read_text())
    ours = perplexity(loaded.model, ids)
    reference = perplexity(float_reference(k_file, config), ids)
    size_gb = k_file.stat().st_size / 1e9
    print(f"import: {k_file.name} ({changed} tensors {kind}, {size_gb * 1e3:.1f} MB) "
          f"in {seconds:.2f} s = {seconds / size_gb:.1f} s/GB")
    print(f"perplexity over {len(ids)} tokens: imported {ours:.4f}, "
          f"float32 dequantized {reference:.4f}")
    return {"import_ppl_ratio": ours / reference, "import_s_per_gb": seconds / size_gb}


def type_errors(path: Path, folder: Path) -> dict[str, dict]:
    """Per GGUF type in ``path``: what the import in ``folder`` made of it and how far
    its values (``mx.dequantize`` of the saved arrays, as the model computes with
    them) are from the file's own (``gguf.quants.dequantize``), over every tensor."""
    import mlx.core as mx
    import numpy as np

    from mlxchat.models.gguf.header import read_header
    from mlxchat.models.gguf.arch import ARCHS, mlx_name, row_heads, unpermute
    from mlxchat.models.gguf.quants import GROUP_SIZE, PLANS, dequantized

    header = read_header(path)
    arch = ARCHS[header.architecture]
    saved = mx.load(str(folder / "model.safetensors"))
    rows: dict[str, dict] = {}
    for t in header.tensors:
        plan, name = PLANS[t.type_name], mlx_name(arch, t.name)
        if not plan.bits or name is None or plan.mode != "affine":
            continue
        base = name.removesuffix(".weight")
        got = np.array(mx.dequantize(saved[f"{base}.weight"],
                                     saved[f"{base}.scales"].astype(mx.float32),
                                     saved[f"{base}.biases"].astype(mx.float32),
                                     group_size=GROUP_SIZE, bits=plan.bits))
        held = dequantized(t).reshape(got.shape)
        heads = row_heads(arch, header, t.name)
        held = unpermute(held, heads) if heads else held
        diff = (got - held).astype(np.float64)
        row = rows.setdefault(t.type_name, {
            "tensors": 0, "values": 0, "became": f"int{plan.bits} g{GROUP_SIZE} ({plan.how})",
            "_err": 0.0, "_norm": 0.0, "max_abs": 0.0, "_inexact": 0})
        row["tensors"] += 1
        row["values"] += held.size
        row["_err"] += float((diff ** 2).sum())
        row["_norm"] += float((held.astype(np.float64) ** 2).sum())
        row["max_abs"] = max(row["max_abs"], float(np.abs(diff).max()))
        row["_inexact"] += int(np.count_nonzero(diff))
    for row in rows.values():
        row["rel_rms"] = math.sqrt(row.pop("_err") / max(row.pop("_norm"), 1e-30))
        row["inexact"] = row.pop("_inexact") / max(row["values"], 1)
    return rows
