"""GGUF import: every supported tensor type, the q/k row order, bad files, the cache."""

from __future__ import annotations

import json
import os

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models import llama

from mlxchat.models import ModelError, import_gguf, load_model
from mlxchat.models.gguf.header import read_header
from mlxchat.models.gguf.importer import CONVERTER_VERSION
from mlxchat.models.testing.text import SPECIALS, _byte_chars

from tests.models.gguf_writer import encode, tiny_llama_gguf, write_gguf

CONFIG = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 1024,
}
TOKENS = SPECIALS + _byte_chars() + ["Ġt", "he"]
MERGES = ["Ġ t", "h e"]
TOKEN_TYPES = [3] * len(SPECIALS) + [1] * (len(TOKENS) - len(SPECIALS))
IDS = [5, 80, 77, 110, 120, 35, 50, 99, 101, 70, 41, 60, 90, 115, 44, 66, 88, 102, 73, 58,
       61, 97, 83, 47]
# Relative logit error allowed against the float source, per file type. A random
# tiny model amplifies 4-bit rounding (measured 0.44); a wrong q/k row order gives ~1.0.
SOURCE_TOLERANCE = {"F32": 1e-6, "F16": 5e-3, "Q8_0": 5e-2, "Q4_0": 0.6, "Q4_1": 0.6}


def rel_error(a: mx.array, b: mx.array) -> float:
    a, b = np.array(a, np.float64), np.array(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def reference_logits(params: dict[str, np.ndarray], tied: bool = False) -> mx.array:
    model = llama.Model(llama.ModelArgs.from_dict(
        {**CONFIG, "vocab_size": len(TOKENS), "tie_word_embeddings": tied}))
    model.load_weights([(k, mx.array(v)) for k, v in params.items()])
    return model(mx.array(IDS)[None])


@pytest.fixture(scope="module")
def source() -> dict[str, np.ndarray]:
    """Float32 weights of a random tiny llama, HF names and row order."""
    mx.random.seed(7)
    model = llama.Model(llama.ModelArgs.from_dict(
        {**CONFIG, "vocab_size": len(TOKENS), "tie_word_embeddings": False}))
    params = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    # Sharper attention makes the logits depend strongly on the rotary pairs.
    for k in params:
        if "q_proj" in k or "k_proj" in k:
            params[k] = params[k] * 4
    return params


def write(path, source, kind, **kwargs):
    return tiny_llama_gguf(path, source, CONFIG, TOKENS, MERGES, TOKEN_TYPES, kind=kind,
                           **kwargs)


@pytest.mark.parametrize("kind", ["F32", "F16", "Q4_0", "Q4_1", "Q8_0"])
def test_every_supported_type_imports_exactly(tmp_path, source, kind):
    path = tmp_path / f"tiny-{kind}.gguf"
    write(path, source, kind)
    loaded = load_model(str(path))
    logits = loaded.model(mx.array(IDS)[None])

    # What the file holds (decoded in numpy) is what the model computes with.
    decoded = {k: (encode(v, kind)[1] if v.ndim == 2 else v) for k, v in source.items()}
    assert rel_error(logits, reference_logits(decoded)) < 1e-4
    # ... and that is the float model up to this type's rounding.
    assert rel_error(logits, reference_logits(source)) < SOURCE_TOLERANCE[kind]

    q_proj = loaded.model.model.layers[0].self_attn.q_proj
    if kind in ("Q4_0", "Q4_1", "Q8_0"):
        assert q_proj.weight.dtype == mx.uint32  # still packed: no de-quantization
        assert q_proj.bits == (8 if kind == "Q8_0" else 4) and q_proj.group_size == 32
        assert q_proj.scales.dtype == mx.float32  # CPU path
        assert loaded.info.quantization == f"int{q_proj.bits} (g32)"
    else:
        assert not hasattr(q_proj, "scales")
        assert q_proj.weight.dtype == mx.float32  # F16 widened on the CPU


@pytest.mark.parametrize("kind", ["F32", "Q4_1"])
def test_skipping_the_unpermutation_would_be_caught(tmp_path, source, kind):
    """A file whose q/k rows are in HF order (no llama.cpp permute) must come out wrong:
    the row order checked above is not a no-op, for packed rows as for float ones."""
    path = tmp_path / "unpermuted.gguf"
    write(path, source, kind, permute=False)
    logits = load_model(str(path)).model(mx.array(IDS)[None])
    decoded = {k: (encode(v, kind)[1] if v.ndim == 2 else v) for k, v in source.items()}
    assert rel_error(logits, reference_logits(decoded)) > 0.5


def test_smollm_layout_loads_with_plain_mlx_lm(tmp_path, source):
    """Q4_1 layers, a Q8_0 embedding and no output.weight, like the bundled model."""
    from mlx_lm import load as mlx_lm_load

    params = {k: v for k, v in source.items() if not k.startswith("lm_head")}
    path = tmp_path / "smollm-like.gguf"
    write(path, params, "Q4_1", overrides={"token_embd": "Q8_0"},
          extra_metadata={"tokenizer.ggml.eot_token_id": 2})
    folder = import_gguf(path)
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4,
                                      "model.embed_tokens": {"group_size": 32, "bits": 8}}
    assert config["tie_word_embeddings"] is True
    assert config["max_position_embeddings"] == CONFIG["max_position_embeddings"]
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)

    ours = load_model(str(path))
    assert ours.info.context_window == CONFIG["max_position_embeddings"]
    assert ours.info.name == "smollm-like" and ours.info.architecture == "llama"
    assert ours.info.bits_per_weight == pytest.approx(
        ours.info.weights_bytes * 8 / ours.info.parameter_count)
    raw_model, raw_tokenizer = mlx_lm_load(str(folder))
    decoded = {k: (encode(v, "Q8_0" if "embed" in k else "Q4_1")[1] if v.ndim == 2 else v)
               for k, v in params.items()}
    expected = reference_logits(decoded, tied=True)
    assert rel_error(ours.model(mx.array(IDS)[None]), expected) < 1e-4
    # mlx-lm keeps float16 scales: equal up to half-precision rounding
    assert rel_error(raw_model(mx.array(IDS)[None]), expected) < 1e-2
    assert raw_tokenizer.encode("the 42") == ours.tokenizer.encode("the 42")


def test_tokenizer_from_metadata(tmp_path, source):
    path = tmp_path / "tok.gguf"
    write(path, source, "Q8_0")
    tok = load_model(str(path)).tokenizer
    text = "the 2024 café"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert TOKENS.index("he") in ids  # merges applied
    digits = [tok.decode([i]) for i in tok.encode("2024")]
    assert digits == ["2", "0", "2", "4"]
    assert tok.encode("<|im_end|>") == [2]  # control tokens are special
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                     add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_start|>assistant\n")


def one_line_error(spec: str) -> str:
    with pytest.raises(ModelError) as info:
        load_model(spec)
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_not_a_gguf(tmp_path):
    fake = tmp_path / "notes.gguf"
    fake.write_text("hello, this is not a model\n")
    assert one_line_error(str(fake)) == f"not a GGUF file: {fake}"
    if os.path.isfile("/etc/hostname"):
        assert one_line_error("/etc/hostname") == "not a GGUF file: /etc/hostname"


def test_truncated_gguf(tmp_path, source):
    path = tmp_path / "full.gguf"
    write(path, source, "Q4_0")
    data = path.read_bytes()
    assert read_header(path).file_size == len(data)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-100])  # inside the last tensor
    assert one_line_error(str(cut)).startswith(f"truncated or damaged GGUF: {cut} ")
    cut.write_bytes(data[:300])  # inside the metadata
    assert one_line_error(str(cut)).startswith(f"truncated or damaged GGUF: {cut} ")
    cut.write_bytes(data[:6])
    assert one_line_error(str(cut)) == f"truncated GGUF: {cut} ends inside its header (6 bytes)"


def test_i_quant_is_refused_by_name(tmp_path):
    path = tmp_path / "iq.gguf"
    meta = {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2"}
    write_gguf(path, meta, [("token_embd.weight", np.zeros((8, 256), np.float32), "Q8_0"),
                            ("blk.0.ffn_down.weight", np.zeros((8, 256), np.float32), "IQ2_XXS")])
    assert one_line_error(str(path)) == (
        "tensor blk.0.ffn_down.weight is IQ2_XXS: 2- and 3-bit i-quants pick each group from "
        "a lattice codebook MLX has no layout for, and no requantization width is measured "
        "for them here; use an IQ4_XS, Q4_K_M or larger file")


def test_other_architecture_is_refused(tmp_path, source):
    path = tmp_path / "phi.gguf"
    write(path, source, "Q8_0", arch="phi3")
    assert one_line_error(str(path)).startswith(
        "architecture 'phi3' is not supported (only llama, qwen2, qwen3, gemma2, gemma3, "
        "qwen2moe, qwen3moe, gpt-oss)")


def test_old_gguf_version_is_refused(tmp_path):
    path = tmp_path / "v1.gguf"
    write_gguf(path, {"general.architecture": "llama"}, [], version=1)
    assert "GGUF version 1 is not supported" in one_line_error(str(path))


def test_second_import_is_a_cache_hit(tmp_path, source, mlxchat_home):
    path = tmp_path / "cached.gguf"
    write(path, source, "Q4_1")
    stages: list[str] = []
    folder = import_gguf(path, progress=lambda stage, done, total: stages.append(stage))
    assert folder.name.endswith(f"-v{CONVERTER_VERSION}")
    assert folder.parent == mlxchat_home / "cache" / "models"
    assert {"hash", "convert", "write"} <= set(stages)
    weights = folder / "model.safetensors"
    before = weights.stat().st_mtime_ns

    stages.clear()
    assert import_gguf(path, progress=lambda stage, done, total: stages.append(stage)) == folder
    assert stages == []  # neither rehashed nor converted
    os.utime(path)  # touched, same bytes: rehash, still the same folder
    assert import_gguf(path, progress=lambda stage, done, total: stages.append(stage)) == folder
    assert "hash" in stages and "convert" not in stages
    assert weights.stat().st_mtime_ns == before
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".import-")]


def test_failed_import_leaves_no_folder(tmp_path, source, mlxchat_home):
    models = mlxchat_home / "cache" / "models"
    before = set(os.listdir(models)) if models.exists() else set()

    def added() -> set[str]:
        return (set(os.listdir(models)) if models.exists() else set()) - before

    path = tmp_path / "bad-tensor.gguf"
    meta = {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2"}
    tensors = [("blk.0.attn_qkv.weight", np.ones((4, 32), np.float32), "F32")]
    write_gguf(path, meta, tensors)
    assert "lacks metadata llama.block_count" in one_line_error(str(path))
    meta.update({"llama.block_count": 1, "llama.embedding_length": 32,
                 "llama.feed_forward_length": 64, "llama.attention.head_count": 2,
                 "tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.eos_token_id": 1})
    write_gguf(path, meta, tensors)
    assert "blk.0.attn_qkv" in one_line_error(str(path))
    assert added() <= {"hashes.json"}
