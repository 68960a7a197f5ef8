"""The MLX embedder on the bundled all-MiniLM-L6-v2 weights matches a plain
numpy BERT written here (one sentence at a time, no padding, exact erf GELU)."""

from __future__ import annotations

import math
import zipfile

import numpy as np
import pytest
from safetensors.numpy import load as load_safetensors

from mlxchat.docs.embedder import load_embedder
from mlxchat.docs.word_pieces import bundled_model_zip

SENTENCES = ["How do I install the package?",
             "Installation: run pip install foo to set it up on your machine.",
             "The weather in Paris is rainy today."]


@pytest.fixture(scope="module")
def weights():
    with zipfile.ZipFile(bundled_model_zip()) as zf:
        return load_safetensors(zf.read("model.safetensors"))


@pytest.fixture(scope="module")
def mlx_embedder():
    return load_embedder(backend="mlx")


def reference(weights, ids: list[int]) -> np.ndarray:
    w = {k: v.astype(np.float64) for k, v in weights.items() if v.dtype != np.int64}

    def norm(x, p):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    erf = np.vectorize(math.erf)
    n = len(ids)
    x = norm(w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    for i in range(6):
        p = f"encoder.layer.{i}."
        heads = []
        for h in range(12):
            cols = slice(32 * h, 32 * (h + 1))
            q, k, v = (lin(x, p + f"attention.self.{t}")[:, cols] for t in ("query", "key", "value"))
            s = q @ k.T / math.sqrt(32)
            a = np.exp(s - s.max(-1, keepdims=True))
            heads.append(a / a.sum(-1, keepdims=True) @ v)
        x = norm(x + lin(np.concatenate(heads, -1), p + "attention.output.dense"),
                 p + "attention.output.LayerNorm")
        h = lin(x, p + "intermediate.dense")
        x = norm(x + lin(0.5 * h * (1 + erf(h / math.sqrt(2))), p + "output.dense"),
                 p + "output.LayerNorm")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def test_mlx_embeddings_match_a_numpy_reference(weights, mlx_embedder):
    assert mlx_embedder.backend == "mlx" and mlx_embedder.dims == 384
    got = mlx_embedder.embed(SENTENCES)  # one padded batch of three lengths
    for row, ids in zip(got, mlx_embedder.token_ids(SENTENCES)):
        want = reference(weights, ids)
        assert np.abs(row - want).max() < 2e-4
        assert abs(np.linalg.norm(row) - 1) < 1e-5


def test_the_numpy_backend_agrees_and_the_vectors_mean_something(mlx_embedder):
    fast = load_embedder(backend="numpy")
    a, b = mlx_embedder.embed(SENTENCES), fast.embed(SENTENCES)
    assert np.abs(a - b).max() < 2e-4
    sims = a @ a.T
    assert sims[0, 1] > 0.3 > sims[0, 2]  # install question ~ install answer, not weather
