"""Embeddings on every API (OpenAI's /v1/embeddings with the official client,
Ollama's /api/embed and /api/embeddings), from the bundled all-MiniLM-L6-v2:
the same vectors whatever the route or encoding, the model named honestly,
and what cannot be served refused in words."""

from __future__ import annotations

import numpy as np
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from mlxchat.docs.embedder import default_embedder

from tests.server.conftest import request

TEXTS = ["The cat is sleeping on the sofa.", "A cat naps on the couch.",
         "Share prices dropped steeply this afternoon."]


@pytest.fixture
def client(served):
    return OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0)


def test_the_openai_client_gets_the_documents_embedder_vectors(client):
    found = client.embeddings.create(model="all-minilm", input=TEXTS)  # base64 by default
    vectors = np.array([d.embedding for d in found.data], dtype=np.float32)
    assert found.model == "all-MiniLM-L6-v2" and [d.index for d in found.data] == [0, 1, 2]
    np.testing.assert_allclose(vectors, default_embedder().embed(TEXTS), atol=1e-6)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3  # paraphrases are near
    tokens = sum(len(e.ids) for e in default_embedder().tokenizer.encode_batch(TEXTS))
    assert found.usage.prompt_tokens == found.usage.total_tokens == tokens
    floats = client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS[0],
                                      encoding_format="float")
    np.testing.assert_allclose(floats.data[0].embedding, vectors[0], atol=1e-6)


def test_ollamas_routes_give_the_same_vectors(served):
    batch = request(served.url, "POST", "/api/embed",
                    {"model": "all-minilm:l6-v2", "input": TEXTS}).json()
    one = request(served.url, "POST", "/api/embeddings",
                  {"model": "all-minilm", "prompt": TEXTS[0]}).json()
    np.testing.assert_allclose(batch["embeddings"], default_embedder().embed(TEXTS), atol=1e-6)
    np.testing.assert_allclose(one["embedding"], batch["embeddings"][0], atol=1e-6)
    assert batch["prompt_eval_count"] > 0 and batch["total_duration"] > 0


def test_a_long_input_is_cut_at_what_the_embedder_reads_unless_truncate_is_false(served):
    long = "word " * 400
    cut = request(served.url, "POST", "/api/embed", {"model": "all-minilm", "input": long})
    assert cut.status == 200 and cut.json()["prompt_eval_count"] == 256
    kept = request(served.url, "POST", "/api/embed",
                   {"model": "all-minilm", "input": ["short", long], "truncate": False})
    assert kept.status == 400 and "'input[1]' is longer than the 256" in kept.json()["error"]


def test_the_chat_model_and_unknown_models_are_named_honestly(client, served):
    with pytest.raises(BadRequestError, match="is the chat model"):
        client.embeddings.create(model="tiny", input="hi")
    with pytest.raises(NotFoundError, match="embeds with 'all-minilm:l6-v2'"):
        client.embeddings.create(model="text-embedding-3-small", input="hi")
    ollama = request(served.url, "POST", "/api/embed", {"model": "tiny", "input": "hi"})
    assert ollama.status == 400 and "is the chat model" in ollama.json()["error"]


@pytest.mark.parametrize("body, words", [
    ({"input": [1, 2, 3]}, "as token ids is not supported"),
    ({"input": [[1, 2], [3]]}, "as token ids is not supported"),
    ({"input": []}, "non-empty list"),
    ({"input": "hi", "dimensions": 128}, "'dimensions' must be 384"),
    ({"input": "hi", "encoding_format": "int8"}, "'encoding_format'"),
    ({"input": ["x"] * 2049}, "at most 2,048"),
])
def test_what_cannot_be_embedded_is_refused_in_words(served, body, words):
    reply = request(served.url, "POST", "/v1/embeddings", {"model": "all-minilm", **body})
    assert reply.status == 400 and words in reply.json()["error"]["message"]


def test_dimensions_equal_to_the_embedders_are_accepted(served):
    reply = request(served.url, "POST", "/v1/embeddings",
                    {"model": "all-minilm", "input": "hi", "dimensions": 384})
    assert reply.status == 200 and len(reply.json()["data"][0]["embedding"]) == 384
