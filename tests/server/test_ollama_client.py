"""The official `ollama` Python client against a real `mlxchat serve` on
127.0.0.1: list, chat, generate, show, ps, embed and the version, each as
Ollama's clients call it (issue 47's ollama_client_calls_ok: 7 of 7)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.server.served_process import ServeProcess

ollama = pytest.importorskip("ollama")


@pytest.fixture(scope="module")
def client(tiny_model_dir, tmp_path_factory):
    env = {**os.environ, "MLXCHAT_HOME": str(tmp_path_factory.mktemp("home")),
           "HF_HUB_OFFLINE": "1"}
    served = ServeProcess(tiny_model_dir, env=env)
    try:
        yield ollama.Client(host=f"http://127.0.0.1:{served.wait_ready()}", timeout=120)
    finally:
        served.end()


@pytest.fixture(scope="module")
def model(tiny_model_dir) -> str:
    return str(tiny_model_dir)


def test_list_names_the_chat_model_and_the_embedder(client, model):
    names = [m.model for m in client.list().models]
    assert names == [model, "all-minilm:l6-v2"]


def test_chat(client, model):
    reply = client.chat(model=model, messages=[{"role": "user", "content": "hi"}],
                        options={"num_predict": 4, "temperature": 0})
    assert reply.done and reply.message.role == "assistant" and reply.message.content
    assert reply.eval_count == 4 and reply.prompt_eval_count > 0


def test_generate_whole_and_streamed_give_the_same_greedy_reply(client, model):
    options = {"num_predict": 6, "temperature": 0}
    whole = client.generate(model=model, prompt="Once upon a time", options=options)
    parts = list(client.generate(model=model, prompt="Once upon a time", options=options,
                                 stream=True))
    assert whole.done and whole.eval_count == 6 and whole.response
    assert "".join(p.response for p in parts) == whole.response
    assert [p.done for p in parts][-1] is True and not any(p.done for p in parts[:-1])
    assert parts[-1].eval_count == 6 and parts[-1].total_duration > 0
    raw = client.generate(model=model, prompt="Once upon a time", raw=True, options=options)
    assert raw.prompt_eval_count < whole.prompt_eval_count  # no template around it


def test_show_describes_the_loaded_model(client, model, tiny_model_dir):
    shown = client.show(model)
    config = json.loads((tiny_model_dir / "config.json").read_text())
    arch = shown.modelinfo["general.architecture"]
    assert arch == config["model_type"]
    assert shown.modelinfo[f"{arch}.block_count"] == config["num_hidden_layers"]
    assert shown.modelinfo[f"{arch}.embedding_length"] == config["hidden_size"]
    assert "completion" in shown.capabilities and "vision" not in shown.capabilities
    assert shown.template and "temperature" in shown.parameters
    assert shown.details.family == arch


def test_ps_says_what_is_loaded(client, model):
    loaded = client.ps().models
    assert [m.model for m in loaded] == [model]
    assert loaded[0].size > 0 and loaded[0].size_vram == 0  # tests run on the CPU
    assert loaded[0].context_length == client.show(model).modelinfo["llama.context_length"]


def test_embed_puts_paraphrases_nearer_than_unrelated_text(client):
    texts = ["How do I reset my password?", "Steps to change a forgotten password",
             "The soup is too salty."]
    found = client.embed(model="all-minilm", input=texts)
    vectors = np.array(found.embeddings)
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert found.prompt_eval_count > 0


def test_version(client):
    # The client has no method for it: its HTTP client asks, as `ollama -v` does.
    answer = client._client.get("/api/version")
    assert answer.status_code == 200 and answer.json()["version"]
