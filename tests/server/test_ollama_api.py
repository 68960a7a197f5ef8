"""Ollama's API beyond chat, on the tiny model: /api/generate (templated, raw,
streamed, with a system prompt), /api/show, /api/ps, /api/version, the load
request, and every field that cannot be served refused in words."""

from __future__ import annotations

import json

import pytest

from tests.server.conftest import request

USER = "Tell me a story"


def generate(served, **body):
    return request(served.url, "POST", "/api/generate",
                   {"model": "tiny", "stream": False, **body})


def test_generate_renders_the_prompt_through_the_template_unless_raw(served):
    templated = generate(served, prompt=USER).json()
    raw = generate(served, prompt=USER, raw=True).json()
    system = generate(served, prompt=USER, system="You are terse and exact.").json()
    tokenizer = served.conv.engine.loaded.tokenizer

    def rendered(*messages) -> int:
        return len(tokenizer.apply_chat_template(list(messages), add_generation_prompt=True))

    user = {"role": "user", "content": USER}
    assert raw["prompt_eval_count"] == len(tokenizer.encode(USER))  # the prompt alone
    assert templated["prompt_eval_count"] == rendered(user)
    # (part of its prompt came from the cache: the template's first tokens)
    assert "You are terse and exact." in [
        served.conv.store.get_session(s.id).system_prompt
        for s in served.conv.store.list_sessions()]
    for body in (templated, raw, system):
        assert body["done"] and body["eval_count"] == 8 and body["done_reason"] == "length"
        assert body["response"] and "context" not in body


def test_a_templated_generate_is_the_chat_turn_of_one_user_message(served):
    said = generate(served, prompt=USER, options={"temperature": 0}).json()["response"]
    chat = request(served.url, "POST", "/api/chat", {
        "model": "tiny", "stream": False, "options": {"temperature": 0},
        "messages": [{"role": "user", "content": USER}]}).json()
    assert said == chat["message"]["content"]


def test_generate_streams_one_object_a_line_and_ends_with_the_counters(served):
    reply = request(served.url, "POST", "/api/generate",
                    {"model": "tiny", "prompt": USER, "options": {"num_predict": 5}})
    lines = [json.loads(line) for line in reply.lines()]
    assert reply.headers["content-type"].startswith("application/x-ndjson")
    assert [line["done"] for line in lines][-1] is True
    assert not any(line["done"] for line in lines[:-1])
    last = lines[-1]
    assert last["eval_count"] == 5 and last["prompt_eval_count"] > 0
    assert last["total_duration"] >= last["eval_duration"] > 0
    whole = generate(served, prompt=USER, options={"num_predict": 5}).json()  # greedy here
    assert "".join(line["response"] for line in lines[:-1]) == whole["response"]


def test_a_request_without_a_prompt_only_loads_the_model(served):
    for path, body in (("/api/generate", {"model": "tiny"}),
                       ("/api/chat", {"model": "tiny", "messages": []})):
        reply = request(served.url, "POST", path, body)
        assert reply.status == 200 and reply.json()["done_reason"] == "load"
    unload = generate(served, keep_alive=0)
    assert unload.status == 400 and "keeps its one model loaded" in unload.json()["error"]
    assert generate(served, prompt="hi", keep_alive="10m").status == 200


@pytest.mark.parametrize("body, words", [
    ({"context": [1, 2, 3]}, "'context'"),
    ({"template": "{{ .Prompt }}"}, "'template'"),
    ({"suffix": "return x"}, "'suffix' needs a model with fill-in-the-middle tokens"),
    ({"width": 512}, "image generation"),
    ({"logprobs": True, "raw": True}, "'logprobs' and penalties go with a prompt rendered"),
    ({"top_logprobs": 2}, "'top_logprobs' needs 'logprobs': true"),
    ({"logprobs": True, "top_logprobs": 21}, "'top_logprobs' may be at most 20"),
    ({"raw": True, "system": "be brief"}, "'system' cannot go with raw"),
    ({"raw": "yes"}, "'raw' must be true or false"),
    ({"think": "maybe"}, "'think' must be"),
    ({"think": True}, "'think' needs a model that thinks; tiny does not"),
    ({"images": ["aGVsbG8="]}, "images"),
    ({"options": {"mirostat": 2}}, "'options.mirostat' is not supported"),
    ({"options": {"typical_p": 0.5}}, "'options.typical_p' is not supported"),
    ({"options": {"no_such": 1}}, "'options.no_such' is not an option"),
    ({"options": {"repeat_penalty": 1.2, "repeat_last_n": 64}}, "'options.repeat_last_n'"),
    ({"format": 5}, "'format'"),
])
def test_what_cannot_be_served_is_refused_in_words(served, body, words):
    reply = generate(served, prompt="hi", **body)
    assert reply.status == 400, reply.body
    assert words in reply.json()["error"]
    assert served.service.answered == 0  # refused before anything ran


def test_logprobs_are_the_tokens_the_reply_is_made_of(served):
    reply = request(served.url, "POST", "/api/chat", {
        "model": "tiny", "stream": False, "logprobs": True, "top_logprobs": 2,
        "messages": [{"role": "user", "content": USER}]}).json()
    entries = reply["logprobs"]
    assert len(entries) == reply["eval_count"]
    assert "".join(e["token"] for e in entries) == reply["message"]["content"]
    for e in entries:  # greedy here: the token taken is the likeliest
        assert len(e["top_logprobs"]) == 2 and e["logprob"] <= 0
        assert e["top_logprobs"][0]["token"] == e["token"]
        assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]
    lines = [json.loads(line) for line in request(served.url, "POST", "/api/generate", {
        "model": "tiny", "prompt": USER, "logprobs": True}).lines()]
    streamed = [e for line in lines[:-1] for e in line["logprobs"]]
    assert "".join(e["token"] for e in streamed) == "".join(line["response"] for line in lines)


def test_presence_and_frequency_penalties_change_the_greedy_reply(served):
    plain = generate(served, prompt=USER).json()["response"]
    penalised = generate(served, prompt=USER, options={"presence_penalty": 2.0,
                                                       "frequency_penalty": 2.0}).json()
    assert penalised["response"] != plain


def test_options_that_describe_the_load_or_turn_a_sampler_off_are_accepted(served):
    options = {"num_ctx": 2048, "num_gpu": 1, "num_thread": 2, "use_mmap": True,
               "mirostat": 0, "typical_p": 1.0, "tfs_z": 1.0, "repeat_penalty": 1.1,
               "min_p": 0.05, "penalize_newline": True}
    reply = generate(served, prompt="hi", options=options, think=False)
    assert reply.status == 200, reply.body


def test_show_ps_and_version(served):
    shown = request(served.url, "POST", "/api/show", {"model": "tiny"}).json()
    info = served.conv.views.model_info
    assert shown["capabilities"][0] == "completion"
    assert shown["model_info"]["llama.context_length"] == info.context_window
    assert shown["model_info"]["llama.block_count"] == info.num_layers
    assert shown["template"] == served.conv.engine.loaded.tokenizer.chat_template
    assert "num_ctx" in shown["parameters"] and shown["details"]["format"] == "mlx"
    assert request(served.url, "POST", "/api/show", {"name": "tiny:latest"}).status == 200
    other = request(served.url, "POST", "/api/show", {"model": "llama3"})
    assert other.status == 404 and "does not exist" in other.json()["error"]
    embedder = request(served.url, "POST", "/api/show", {"model": "all-minilm"}).json()
    assert embedder["capabilities"] == ["embedding"]
    assert embedder["model_info"]["bert.embedding_length"] == 384
    running = request(served.url, "GET", "/api/ps").json()["models"]
    assert [m["model"] for m in running] == ["tiny"]
    assert running[0]["context_length"] == served.service.window
    assert running[0]["size_vram"] == 0 and running[0]["size"] >= info.weights_bytes
    assert request(served.url, "GET", "/api/version").json()["version"]


@pytest.mark.parametrize("method, path", [
    ("POST", "/api/pull"), ("POST", "/api/push"), ("POST", "/api/create"),
    ("POST", "/api/copy"), ("DELETE", "/api/delete"), ("POST", "/api/blobs/sha256:abc"),
    ("HEAD", "/api/blobs/sha256:abc")])
def test_model_management_is_refused_in_ollamas_shape(served, method, path):
    reply = request(served.url, method, path, {"model": "x"})
    assert reply.status == 501
    if method != "HEAD":
        assert "is not supported" in reply.json()["error"]


def test_a_suffix_fills_in_the_middle_where_the_model_has_the_tokens(tmp_path_factory,
                                                                      tmp_path):
    from mlxchat.models import load_folder

    from tests.families.builders import with_template, write_family_model
    from tests.server.conftest import serve

    fim = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")
    base = with_template("llama3", "{{ messages[0]['content'] }}")
    family = with_template("llama3", base.template, specials=base.specials + fim)
    coder = load_folder(write_family_model(family, tmp_path_factory.mktemp("fim")),
                        name="tiny", spec="tiny")
    running = serve(coder, tmp_path / "fim.db")
    try:
        shown = request(running.url, "POST", "/api/show", {"model": "tiny"}).json()
        assert "insert" in shown["capabilities"]
        reply = generate(running, prompt="def f(", suffix="    return x").json()
        encode = coder.tokenizer.encode
        assert reply["prompt_eval_count"] == 3 + len(encode("def f(", add_special_tokens=False)) \
            + len(encode("    return x", add_special_tokens=False))  # the three FIM tokens
        assert reply["done"] and reply["eval_count"] > 0
    finally:
        running.stop()



def test_think_turns_a_thinking_models_thoughts_on_and_off(tmp_path_factory, tmp_path):
    from tests.server.conftest import real_qwen3, serve

    running = serve(real_qwen3(tmp_path_factory.mktemp("qwen3")), tmp_path / "q.db")
    try:
        shown = request(running.url, "POST", "/api/show", {"model": "tiny"}).json()
        assert "thinking" in shown["capabilities"]
        for think in (True, False, None):
            body = {} if think is None else {"think": think}
            assert generate(running, prompt="hi", **body).status == 200
    finally:
        running.stop()
