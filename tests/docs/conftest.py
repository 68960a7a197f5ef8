from __future__ import annotations

import zipfile

import numpy as np
import pytest
from tokenizers import Tokenizer

from mlxchat.docs.embedder import BertConfig, BertEmbedder
from mlxchat.docs.word_pieces import bundled_model_zip
from mlxchat.store import open_store


class CountingEmbedder(BertEmbedder):
    """A tiny random BERT (real MLX or numpy layers) that counts what it embeds."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.embedded: list[str] = []

    def embed(self, texts):
        self.embedded.extend(texts)
        return super().embed(texts)


def tiny_embedder(*, backend: str = "mlx") -> CountingEmbedder:
    with zipfile.ZipFile(bundled_model_zip()) as zf:
        tokenizer = Tokenizer.from_str(zf.read("tokenizer.json").decode())
    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=512)
    rng = np.random.default_rng(0)
    shapes = {"embeddings.word_embeddings.weight": (30522, 16),
              "embeddings.position_embeddings.weight": (512, 16),
              "embeddings.token_type_embeddings.weight": (2, 16),
              "embeddings.LayerNorm.weight": (16,), "embeddings.LayerNorm.bias": (16,)}
    p = "encoder.layer.0."
    for name, out, inp in (("attention.self.query", 16, 16), ("attention.self.key", 16, 16),
                           ("attention.self.value", 16, 16), ("attention.output.dense", 16, 16),
                           ("intermediate.dense", 32, 16), ("output.dense", 16, 32)):
        shapes[p + name + ".weight"], shapes[p + name + ".bias"] = (out, inp), (out,)
    for name in ("attention.output.LayerNorm", "output.LayerNorm"):
        shapes[p + name + ".weight"], shapes[p + name + ".bias"] = (16,), (16,)
    weights = {k: rng.normal(size=s).astype(np.float32) * 0.2 for k, s in shapes.items()}
    return CountingEmbedder(config, weights, tokenizer, name="tiny", backend=backend)


@pytest.fixture
def tiny_embed() -> CountingEmbedder:
    return tiny_embedder()


@pytest.fixture
def store():
    s = open_store(":memory:")
    yield s
    s.close()
