"""The chat beside the server (``server/beside.py``) is one member of the
API's batch: a chat reply and an API reply decode in the same steps (counted
by the batch's own figures), the chat's greedy reply is token for token what
it is alone, and `/v1/models` says the parallel figure. The chat is driven
through its conversation object; the API through the openai client on
127.0.0.1."""

from __future__ import annotations

import threading

import pytest
from openai import OpenAI

from mlxchat.engine.batch.caches import SPEC_OFF
from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.server.beside import SharedServer
from mlxchat.server.options import ServeOptions
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

from tests.server.conftest import tiny_settings
from tests.waiting import until

CHAT_Q = "Tell me about rivers."
API_Q = "Why is the sky blue?"
TOKENS = 48
LONG = 400
"""A chat reply long enough to be decoding when the server stops."""


def open_chat(tiny, db, tokens: int = TOKENS):
    return open_conversation(tiny_settings(tokens), model_spec="tiny",
                             store_factory=lambda: open_store(db),
                             load_model=lambda spec, progress=None: tiny).conversation


@pytest.fixture
def chat(tmp_path, tiny):
    conv = open_chat(tiny, tmp_path / "s.db")
    yield conv
    conv.shutdown()


def chat_alone(tiny, tmp_path) -> list[int]:
    """The chat's reply to ``CHAT_Q`` with no server beside it."""
    conv = open_chat(tiny, tmp_path / "alone.db")
    try:
        done = [e for e in conv.turns.send(CHAT_Q) if isinstance(e, TurnDone)]
        return list(done[0].token_ids)
    finally:
        conv.shutdown()


def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_a_chat_reply_and_an_api_reply_decode_in_the_same_steps(tmp_path, tiny, chat):
    solo = chat_alone(tiny, tmp_path)
    server = SharedServer(chat, ServeOptions(port=0, parallel=2))
    try:
        batch, compute = server.batch, chat.engine.compute
        assert batch is not None
        steps: dict[str, list[int]] = {"chat": [], "api": []}
        got: dict[str, object] = {}

        def chat_turn() -> None:
            for event in chat.turns.send(CHAT_Q):
                if isinstance(event, TextDelta):
                    steps["chat"].append(batch.steps)
                elif isinstance(event, TurnDone):
                    got["chat"] = event

        def api_turn() -> None:
            stream = client(server.url).chat.completions.create(
                model="tiny", max_tokens=TOKENS, temperature=0, stream=True,
                messages=[{"role": "user", "content": API_Q}])
            pieces = []
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                    steps["api"].append(batch.steps)
            got["api"] = "".join(pieces)

        held = compute.acquire("test")  # both wait for it, then start together
        threads = [threading.Thread(target=job) for job in (chat_turn, api_turn)]
        try:
            for t in threads:
                t.start()
            until(lambda: compute.ahead_of("chat")
                  and any(compute.ahead_of(o) for o in ("api", "api-1")))
        finally:
            compute.release(held)
        for t in threads:
            t.join(60)
        done = got["chat"]
        assert isinstance(done, TurnDone) and got["api"]
        assert list(done.token_ids) == solo  # token for token what it is alone
        assert done.stats.spec_off_reason == SPEC_OFF  # it decoded in the batch
        # Both advanced in the same steps: one step gave each its next token.
        assert batch.widest == 2
        assert batch.steps < len(done.token_ids) + len(steps["api"])
        chat_steps, api_steps = steps["chat"], steps["api"]
        assert chat_steps[0] < api_steps[-1] and api_steps[0] < chat_steps[-1]
        assert batch.members == 0  # both left
        listed = client(server.url).models.list().data[0]
        assert listed.model_extra["parallel"] == 2
        assert "2 requests at once, decoded together with the chat's replies" \
            in server.describe()
    finally:
        server.stop()
    # Stopped: the chat's next reply decodes alone.
    after = [e for e in chat.turns.send("And now?") if isinstance(e, TurnDone)][0]
    assert after.stats.spec_off_reason != SPEC_OFF and after.reply


def test_one_at_a_time_takes_turns_with_the_chat_as_before(chat):
    server = SharedServer(chat, ServeOptions(port=0, parallel=1))
    try:
        assert server.batch is None
        assert "one request at a time, taking turns with the chat" in server.describe()
        listed = client(server.url).models.list().data[0]
        assert listed.model_extra["parallel"] == 1
    finally:
        server.stop()


def test_stopping_the_server_lets_a_chat_reply_in_the_batch_end_first(tmp_path, tiny):
    """The batch closes after its members: a chat reply decoding in it when the
    server stops goes on to its end, the same reply it is alone."""
    chat = open_chat(tiny, tmp_path / "s.db", LONG)
    solo_conv = open_chat(tiny, tmp_path / "alone.db", LONG)
    try:
        solo = [e for e in solo_conv.turns.send(CHAT_Q) if isinstance(e, TurnDone)][0]
    finally:
        solo_conv.shutdown()
    server = SharedServer(chat, ServeOptions(port=0, parallel=2))
    batch, compute = server.batch, chat.engine.compute
    got: list[object] = []
    try:
        talking = threading.Thread(target=lambda: got.extend(chat.turns.send(CHAT_Q)))
        talking.start()
        until(lambda: batch.alone_steps > 0)  # decoding alone, until another waits:
        held = compute.acquire("test")  # it joined the batch, which waits for the lock
        assert batch.members == 1
        stopper = threading.Thread(target=server.stop)
        try:
            stopper.start()
            other = server.service.slots.all[1].engine
            until(lambda: not other._worker.alive())  # the slots closed: the batch next
        finally:
            compute.release(held)
        stopper.join(60)
        talking.join(60)
    finally:
        chat.shutdown()
    done = [e for e in got if isinstance(e, TurnDone)][0]
    assert list(done.token_ids) == list(solo.token_ids)
    assert done.stats.finish_reason == solo.stats.finish_reason != "cancelled"
    assert not stopper.is_alive() and batch.members == 0


def test_the_api_kv_figure_counts_every_slot(chat):
    server = SharedServer(chat, ServeOptions(port=0, parallel=2))
    try:
        api, compute = client(server.url), chat.engine.compute

        def asking(i: int) -> threading.Thread:
            return threading.Thread(target=lambda: api.chat.completions.create(
                model="tiny", max_tokens=4, temperature=0, extra_headers={"X-Session": f"kv{i}"},
                messages=[{"role": "user", "content": f"Hi {i}."}]))
        held = compute.acquire("test")  # both slots take one, then run
        threads = [asking(i) for i in range(2)]
        try:
            for t in threads:
                t.start()
            until(lambda: compute.ahead_of("api") and compute.ahead_of("api-1"))
        finally:
            compute.release(held)
        for t in threads:
            t.join(60)
        each = [s.conv.views.state().kv_bytes for s in server.service.slots.all]
        assert all(each) and server.kv_bytes() == sum(each)
    finally:
        server.stop()
