"""The bundled SmolLM2 INT4 import, end to end (a few seconds each on one CPU core)."""

from __future__ import annotations

import math
import re

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

from tests.models.prose import PROSE

pytestmark = pytest.mark.bundled

PPL_TOKENS = 32
"""Perplexity is measured on PROSE's first 32 tokens, not all ~100: a forward pass
of this model costs ~0.3 s a token on this CPU, and each comparison below is of
two models on the same tokens, which a wrong weight or kernel breaks on any of
them; 'below 8' still tells English from noise (a uniform guess is ~49,000)."""

COMMON_WORDS = {"the", "a", "an", "of", "is", "in", "and", "to", "capital", "city", "france",
                "paris", "it", "that", "this", "was", "for", "on", "with", "as", "are", "be"}


def perplexity(model: nn.Module, ids: list[int]) -> float:
    tokens = mx.array(ids)[None]
    logits = model(tokens[:, :-1]).astype(mx.float32)
    return math.exp(nn.losses.cross_entropy(logits, tokens[:, 1:]).mean().item())


def dequantized_copy(model: nn.Module) -> nn.Module:
    """The same weights as plain float32 Linear/Embedding layers (no quantized kernels)."""
    from mlx_lm.models import llama

    weights = [(f"{name}.weight", mx.dequantize(m.weight, m.scales, m.biases,
                                                 group_size=m.group_size, bits=m.bits))
               for name, m in model.named_modules()
               if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))]
    weights += [(k, v) for k, v in tree_flatten(model.parameters()) if k.endswith("norm.weight")]
    plain = llama.Model(model.args)
    plain.load_weights([(k, v.astype(mx.float32)) for k, v in weights])  # strict: all covered
    assert not any(hasattr(m, "scales") for _, m in plain.named_modules())
    return plain


@pytest.fixture(scope="module")
def prose(bundled_model) -> tuple[list[int], float]:
    """The tokens perplexity is measured on, and the bundled model's, computed once."""
    ids = bundled_model.tokenizer.encode(PROSE)
    assert 90 <= len(ids) <= 110
    ids = ids[:PPL_TOKENS]
    return ids, perplexity(bundled_model.model, ids)


def test_weights_stay_int4_with_float32_scales(bundled_model):
    info = bundled_model.info
    assert info.name == "smollm2-135m" and info.architecture == "llama"
    assert info.context_window == 8192  # from llama.context_length
    assert (info.num_layers, info.kv_heads, info.head_dim) == (30, 3, 64)
    # Most weights int4; the embedding int8 (checked below): both are named.
    assert info.quantization == "int4 (g32) + int8 (g32)" and info.device == "cpu"
    assert info.scales_dtype == "float32"
    assert info.bits_per_weight == pytest.approx(info.weights_bytes * 8 / info.parameter_count)
    inner = bundled_model.model.model
    q = inner.layers[0].self_attn.q_proj
    assert (q.weight.dtype, q.bits, q.group_size, q.scales.dtype) == (
        mx.uint32, 4, 32, mx.float32)
    assert (inner.embed_tokens.bits, inner.embed_tokens.weight.dtype) == (8, mx.uint32)
    assert inner.norm.weight.dtype == mx.float32


def test_perplexity_int4_and_dequantized(bundled_model, prose):
    ids, int4 = prose
    assert len(ids) == PPL_TOKENS
    dense = perplexity(dequantized_copy(bundled_model.model), ids)
    print(f"perplexity over {len(ids)} tokens: int4 {int4:.4f}, dequantized float32 "
          f"{dense:.4f} ({(int4 - dense) / dense:+.2e})")
    assert int4 < 8
    assert abs(int4 - dense) / dense < 0.02


def test_greedy_chat_reply_is_english_and_stops(bundled_model):
    from mlx_lm import stream_generate
    from mlx_lm.sample_utils import make_sampler

    tok = bundled_model.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True)
    responses = list(stream_generate(bundled_model.model, tok, prompt, max_tokens=24,
                                     sampler=make_sampler(0.0)))
    text = "".join(r.text for r in responses).strip()
    last = responses[-1]
    print(f"reply: {text!r} ({last.finish_reason}, {last.generation_tps:.1f} tok/s)")
    letters = sum(c.isascii() and (c.isalpha() or c.isspace()) for c in text)
    assert text and letters / len(text) > 0.85
    words = set(re.findall(r"[a-z]+", text.lower()))
    assert len(words & COMMON_WORDS) >= 3
    assert "<|im_end|>" not in text and "<|im_start|>" not in text
    assert last.finish_reason == "stop" and last.token in tok.eos_token_ids
    assert len(responses) < 24


def test_plain_mlx_lm_reads_the_same_folder(bundled_model, bundled_model_dir):
    from mlx_lm import load

    model, tok = load(str(bundled_model_dir))
    ids = tok.encode("The capital of France is")
    assert ids == bundled_model.tokenizer.encode("The capital of France is")
    theirs = model(mx.array(ids)[None])[0, -1]
    ours = bundled_model.model(mx.array(ids)[None])[0, -1]
    assert mx.argmax(theirs).item() == mx.argmax(ours).item()
    assert mx.abs(theirs.astype(mx.float32) - ours).max().item() < 0.1  # float16 scales


def test_tokenizer_round_trip_and_digits(bundled_model):
    tok = bundled_model.tokenizer
    text = "In 2024, the café in Zürich served 1350 crème brûlée desserts."
    assert tok.decode(tok.encode(text)) == text
    assert [tok.decode([i]) for i in tok.encode("31415")] == ["3", "1", "4", "1", "5"]
    assert tok.encode("<|im_start|>user")[0] == 1 and tok.eos_token_id == 2
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                     add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_start|>assistant\n")


def test_new_reader_keeps_the_old_arrays_and_perplexity(bundled_model_dir, prose, tmp_path):
    """mx.load used to read the bundled Q4_1 file; the gguf-package path must give the
    very same arrays (after the q/k row fix) and so the same perplexity."""
    import shutil

    from mlxchat.models import bundled_gguf, load_folder
    from mlxchat.models.gguf.arch import ARCHS, mlx_name, unpermute

    old = mx.load(str(bundled_gguf()))
    ours = mx.load(str(bundled_model_dir / "model.safetensors"))
    heads = {"attn_q": 9, "attn_k": 3}
    rebuilt = {}
    for name, a in old.items():
        base, _, part = name.rpartition(".")
        target = mlx_name(ARCHS["llama"], f"{base}.weight").removesuffix(".weight")
        n = heads.get(base.rsplit(".", 1)[-1])
        rebuilt[f"{target}.{part}"] = unpermute(a, n) if n else a
    assert rebuilt.keys() == ours.keys()
    for k, a in rebuilt.items():
        assert a.dtype == ours[k].dtype and mx.array_equal(a, ours[k]).item(), k

    folder = tmp_path / "old-path"
    shutil.copytree(bundled_model_dir, folder)
    mx.save_safetensors(str(folder / "model.safetensors"), rebuilt, {"format": "mlx"})
    ids, ours_perplexity = prose
    assert perplexity(load_folder(folder).model, ids) == ours_perplexity


def test_at_its_defaults_the_first_answer_is_english(bundled_model, tmp_path):
    """A new session left to the model's own sampling (the catalog's, measured):
    the question that got French nonsense at temperature 0.7 gets an answer."""
    from mlxchat.config import Settings
    from mlxchat.engine.core import ChatEngine
    from mlxchat.engine.events import TurnDone
    from mlxchat.session.conversation import Conversation
    from mlxchat.store import open_store

    settings = Settings()
    settings.generation.max_tokens = 20
    assert settings.generation.temperature is None  # the model's
    conv = Conversation(settings=settings, store=open_store(tmp_path / "s.db"),
                        engine=ChatEngine(bundled_model), model_spec="smollm2-135m")
    try:
        done = [e for e in conv.turns.send("What is the capital of France?")
                if isinstance(e, TurnDone)][-1]
    finally:
        conv.close()
    text = done.reply
    words = set(re.findall(r"[a-z]+", text.lower()))
    assert len(words & COMMON_WORDS) >= 2 and "paris" in words, text
