"""`serve --parallel N`: conversations decoded together in one batch, through
the real server and the openai client. Each reply is the one it would be
alone (greedy); members join and leave between steps; a member whose client
went away is dropped, what it said kept; a newcomer's prefill lets the
others' steps through between its chunks; memory holds the next one back."""

from __future__ import annotations

import json
import threading

import pytest
from openai import OpenAI

from tests.server.conftest import serve
from tests.waiting import until

OWNERS = ("chat", "api-1", "api-2")
"""The compute lock's names of the slots' engines (the first is the served one's)."""
QUESTIONS = ("Tell me about rivers.", "Count to nine.", "Why is the sky blue?")


def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def ask(url: str, text: str, max_tokens: int, session: str, **kw) -> str:
    reply = client(url).chat.completions.create(
        model="tiny", max_tokens=max_tokens, temperature=0,
        messages=[{"role": "user", "content": text}],
        extra_headers={"X-Session": session}, **kw)
    return reply.choices[0].message.content


def alone(tiny, tmp_path, asks) -> list[str]:
    """Each (text, max_tokens, kw) asked of a one-at-a-time server."""
    served = serve(tiny, tmp_path / "alone.db", max_tokens=64)
    try:
        return [ask(served.url, text, n, f"alone-{i}", **kw)
                for i, (text, n, kw) in enumerate(asks)]
    finally:
        served.stop()


def together(served, jobs, started=None) -> None:
    """Run ``jobs`` (threads) with the compute lock held until every one's engine
    waits for it (or ``started()``), so they start together; then to their end."""
    compute = served.conv.engine.compute
    held = compute.acquire("test")
    threads = [threading.Thread(target=job) for job in jobs]
    try:
        for t in threads:
            t.start()
        until(started or (lambda: all(compute.ahead_of(o) for o in OWNERS[:len(jobs)])))
    finally:
        compute.release(held)
    for t in threads:
        t.join(60)


@pytest.fixture
def parallel3(tiny, tmp_path):
    running = serve(tiny, tmp_path / "p.db", parallel=3, max_tokens=64)
    yield running
    running.stop()


def test_replies_decoded_together_are_the_replies_alone(tiny, tmp_path, parallel3):
    asks = [(q, 48, {}) for q in QUESTIONS]
    solo = alone(tiny, tmp_path, asks)
    got: dict[int, str] = {}
    together(parallel3, [lambda i=i: got.setdefault(i, ask(parallel3.url, QUESTIONS[i], 48,
                                                          f"s{i}"))
                         for i in range(3)])
    assert [got[i] for i in range(3)] == solo
    batch = parallel3.service.slots.batch
    assert batch.widest == 3 and batch.steps < sum(len(s) for s in solo)
    listed = client(parallel3.url).models.list().data[0]
    assert listed.model_extra["parallel"] == 3


def test_a_member_joins_while_another_streams_and_leaves_before_it(tiny, tmp_path, parallel3):
    asks = [(QUESTIONS[0], 200, {}), (QUESTIONS[1], 3, {}), (QUESTIONS[2], 24, {})]
    solo = alone(tiny, tmp_path, asks)
    compute, url = parallel3.conv.engine.compute, parallel3.url
    got: dict[int, str] = {}
    pieces: list[str] = []

    def long() -> None:
        stream = client(url).chat.completions.create(
            model="tiny", max_tokens=200, temperature=0, stream=True,
            messages=[{"role": "user", "content": QUESTIONS[0]}],
            extra_headers={"X-Session": "long"})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        got[0] = "".join(pieces)
    together(parallel3, [long, lambda: got.setdefault(1, ask(url, QUESTIONS[1], 3, "short"))])
    # ``together`` returned: the short one left; the long one may still stream.
    held = compute.acquire("test")  # the batch stops before its next step
    try:
        newcomer = threading.Thread(target=lambda: got.setdefault(2, ask(url, QUESTIONS[2],
                                                                         24, "late")))
        newcomer.start()
        until(lambda: parallel3.service.lane.running >= 1 + (0 not in got))
    finally:
        compute.release(held)
    newcomer.join(60)
    until(lambda: 0 in got)
    assert [got[0], got[1], got[2]] == solo


def test_a_member_whose_client_left_is_dropped_and_the_others_go_on(tiny, tmp_path,
                                                                   parallel3):
    asks = [(QUESTIONS[0], 200, {}), (QUESTIONS[1], 200, {})]
    solo = alone(tiny, tmp_path, asks)
    url = parallel3.url
    got: dict[str, str] = {}

    def leaver() -> None:
        stream = client(url).chat.completions.create(
            model="tiny", max_tokens=200, temperature=0, stream=True,
            messages=[{"role": "user", "content": QUESTIONS[0]}],
            extra_headers={"X-Session": "leaver"})
        seen = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen.append(chunk.choices[0].delta.content)
            if len(seen) == 3:
                break
        stream.close()  # the client goes away mid-reply
        got["leaver"] = "".join(seen)
    together(parallel3, [leaver, lambda: got.setdefault("stayer", ask(url, QUESTIONS[1], 200,
                                                                      "stayer"))])
    assert got["stayer"] == solo[1]
    store = parallel3.service.store
    session = store.find_session("leaver", prefix=False)
    until(lambda: store.get_session(session.id).leaf_id is not None
          and store.branch_path(store.get_session(session.id).leaf_id)[-1].role == "assistant")
    kept = store.branch_path(store.get_session(session.id).leaf_id)[-1].content
    assert kept.startswith(got["leaver"]) and solo[0].startswith(kept)


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}},
          "required": ["name"], "additionalProperties": False}


def test_a_member_with_a_schema_beside_one_without(tiny, tmp_path, parallel3):
    fmt = {"response_format": {"type": "json_schema",
                               "json_schema": {"name": "n", "schema": SCHEMA}}}
    asks = [(QUESTIONS[0], 48, fmt), (QUESTIONS[1], 48, {})]
    solo = alone(tiny, tmp_path, asks)
    url, got = parallel3.url, {}
    together(parallel3, [lambda: got.setdefault(0, ask(url, QUESTIONS[0], 48, "json", **fmt)),
                         lambda: got.setdefault(1, ask(url, QUESTIONS[1], 48, "free"))])
    assert [got[0], got[1]] == solo
    assert set(json.loads(got[0])) == {"name"}


def test_a_newcomers_prefill_lets_the_others_steps_through(tiny, tmp_path, parallel3):
    long_prompt = "Summarize: " + "rivers and harvests along the coast " * 45
    asks = [(QUESTIONS[0], 600, {}), (long_prompt, 4, {})]
    solo = alone(tiny, tmp_path, asks)
    url, got = parallel3.url, {}
    compute, batch = parallel3.conv.engine.compute, parallel3.service.slots.batch
    before = compute.figures().passed_on
    together(parallel3, [lambda: got.setdefault(0, ask(url, QUESTIONS[0], 600, "decoding")),
                         lambda: got.setdefault(1, ask(url, long_prompt, 4, "newcomer"))])
    assert [got[0], got[1]] == solo
    # Its ~1,600 tokens went in chunks of at most CHUNK_TOKENS, a batch step between two.
    assert compute.figures().passed_on - before >= 5
    assert batch.widest == 2


def test_memory_holds_the_next_member_back_and_says_why(tiny, tmp_path):
    asks = [(q, 24, {}) for q in QUESTIONS[:2]]
    solo = alone(tiny, tmp_path, asks)
    served = serve(tiny, tmp_path / "m.db", parallel=2, max_tokens=64, memory_bytes=1)
    try:
        got: dict[int, str] = {}
        lane, compute = served.service.lane, served.conv.engine.compute
        together(served, [lambda i=i: got.setdefault(i, ask(served.url, QUESTIONS[i], 24,
                                                            f"m{i}"))
                          for i in range(2)],
                 # One runs (its engine waits to compute), the other is held back.
                 started=lambda: (lane.running == 1 and lane.waiting == 1
                                  and any(compute.ahead_of(o) for o in OWNERS[:2])))
        assert [got[0], got[1]] == solo
        assert served.service.slots.batch.widest <= 1  # one at a time (alone: not stepped)
        assert "would not fit" in served.service.admission.reason
        assert "1 at once fit" in served.service.admission.reason
    finally:
        served.stop()
