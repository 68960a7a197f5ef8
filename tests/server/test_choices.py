"""``n`` choices from one prompt (prefilled once, sampled as batch members,
each its own seed): whole and streamed on chat completions (a choice index
on every chunk), on legacy completions with lists of prompts and token ids,
and ``best_of`` ranked by mean log-probability. Only choice 0 is stored."""

from __future__ import annotations

import json

from openai import OpenAI

from tests.server.conftest import request, serve

ASK = [{"role": "user", "content": "Tell me about rivers."}]


def _api(served) -> OpenAI:
    return OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_n_choices_whole_and_streamed(served):
    api = _api(served)
    whole = api.chat.completions.create(model="tiny", messages=ASK, n=3, temperature=1.0,
                                        seed=11, max_tokens=6)
    assert [c.index for c in whole.choices] == [0, 1, 2]
    texts = [c.message.content for c in whole.choices]
    assert len(set(texts)) == 3  # three seeds
    assert whole.usage.completion_tokens == 18  # every choice's tokens
    stored = served.conv.store.get_session(served.conv.session.id).messages
    assert [m.content for m in stored if m.role == "assistant"] == [texts[0]]

    chunks = list(api.chat.completions.create(model="tiny", messages=ASK, n=3,
                                              temperature=1.0, seed=11, max_tokens=6,
                                              stream=True))
    streamed = {i: "".join(ch.delta.content or "" for c in chunks for ch in c.choices
                           if ch.index == i) for i in range(3)}
    assert [streamed[i] for i in range(3)] == texts  # the same seed, the same choices
    finishes = [ch.index for c in chunks for ch in c.choices if ch.finish_reason]
    assert sorted(finishes) == [0, 1, 2] and finishes[-1] == 0


def test_n_above_the_bound_is_refused_by_name(served):
    reply = request(served.url, "POST", "/v1/chat/completions",
                    {"model": "tiny", "messages": ASK, "n": 9})
    assert reply.status == 400 and reply.json()["error"]["param"] == "n"
    assert "at most 8" in reply.json()["error"]["message"]


def test_choices_in_a_batch_of_conversations(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", parallel=2)
    try:
        reply = _api(running).chat.completions.create(model="tiny", messages=ASK, n=2,
                                                      temperature=1.0, seed=5, max_tokens=5)
        assert len(reply.choices) == 2
        assert reply.choices[0].message.content != reply.choices[1].message.content
    finally:
        running.stop()


def test_completion_prompts_lists_and_token_ids(served, tiny):
    api = _api(served)
    ids = list(tiny.tokenizer.encode("Once upon a time"))
    one = api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4,
                                 temperature=0)
    listed = api.completions.create(model="tiny", prompt=["Once upon a time", "Far away"],
                                    max_tokens=4, temperature=0)
    assert [c.index for c in listed.choices] == [0, 1]
    assert listed.choices[0].text == one.choices[0].text
    by_ids = api.completions.create(model="tiny", prompt=ids, max_tokens=4, temperature=0)
    assert by_ids.choices[0].text == one.choices[0].text
    nested = api.completions.create(model="tiny", prompt=[ids, ids], max_tokens=4,
                                    temperature=0, n=2)
    assert [c.index for c in nested.choices] == [0, 1, 2, 3]
    assert {c.text for c in nested.choices} == {one.choices[0].text}
    assert nested.usage.prompt_tokens == 2 * len(ids)


def test_best_of_keeps_the_likeliest(served):
    api = _api(served)
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 5,
            "temperature": 1.0, "seed": 3}
    every = api.completions.create(n=4, logprobs=0, **body)
    means = [sum(c.logprobs.token_logprobs) / len(c.logprobs.token_logprobs)
             for c in every.choices]
    best = api.completions.create(n=1, best_of=4, **body)
    assert best.choices[0].text == every.choices[means.index(max(means))].text
    assert best.choices[0].logprobs is None  # ranked by them, not asked for
    streamed = request(served.url, "POST", "/v1/completions",
                       {**body, "best_of": 2, "stream": True})
    assert streamed.status == 400 and json.loads(streamed.body)["error"]["param"] == "best_of"
