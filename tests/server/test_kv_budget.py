"""``mlxchat serve --kv-budget``: past the budget the least recently used API
sessions lose their KV segments (files deleted, messages kept); such a
session still answers, the same reply, recomputing its history."""

from __future__ import annotations

import pytest
from openai import OpenAI

from mlxchat.cli.serve import parse_size
from mlxchat.errors import UserError
from mlxchat.store import open_store

from tests.server.conftest import serve


def _turn(api: OpenAI, messages: list[dict], text: str):
    messages.append({"role": "user", "content": text})
    reply = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                        max_tokens=6)
    messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    return reply


def _interleave(tiny, db, budget: int | None):
    """Conversation A, then B, then A again; what A's second turn got and the server."""
    running = serve(tiny, db, kv_budget_bytes=budget)
    api = OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=60)
    a: list[dict] = []
    b: list[dict] = []
    try:
        _turn(api, a, "Conversation A starts here.")
        a_id = running.conv.session.id
        _turn(api, b, "Conversation B is another one.")
        evicted = running.service.last_eviction
        again = _turn(api, a, "A goes on.")
        return running, again, a_id, evicted
    finally:
        running.stop()


def test_the_least_recently_used_session_loses_its_segments_not_its_messages(tiny, tmp_path):
    kept, kept_reply, _, _ = _interleave(tiny, tmp_path / "kept.db", None)
    assert kept.service.last_eviction is None
    assert kept_reply.usage.prompt_tokens_details.cached_tokens > 0
    small, reply, a_id, evicted = _interleave(tiny, tmp_path / "small.db", 1)
    assert evicted is not None and evicted.sessions == [a_id] and evicted.files
    assert not any(f.exists() for f in evicted.files)
    assert evicted.before_bytes > evicted.after_bytes
    # A answered all the same: recomputed from its messages' ledger, the same reply.
    assert reply.choices[0].message.content == kept_reply.choices[0].message.content
    assert reply.usage.prompt_tokens == kept_reply.usage.prompt_tokens
    assert reply.usage.prompt_tokens_details.cached_tokens \
        < kept_reply.usage.prompt_tokens_details.cached_tokens
    store = open_store(tmp_path / "small.db")
    try:
        assert store.get_session(a_id).messages[0].content == "Conversation A starts here."
        assert len(store.get_session(a_id).messages) == 4
    finally:
        store.close()


def test_a_roomy_budget_evicts_nothing(tiny, tmp_path):
    running, _, _, evicted = _interleave(tiny, tmp_path / "roomy.db", 10**12)
    assert evicted is not None and evicted.sessions == []
    assert evicted.before_bytes == evicted.after_bytes > 0


def test_sizes_read_with_their_units():
    assert parse_size("8G") == 8 * 10**9
    assert parse_size("500m") == 500 * 10**6
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("0") == 0
    with pytest.raises(UserError):
        parse_size("lots")
