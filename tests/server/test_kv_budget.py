"""``mlxchat serve --kv-budget``: past the budget the least recently used API
sessions lose their KV segments (files deleted, messages kept); such a
session still answers, the same reply, recomputing its history."""

from __future__ import annotations

import logging

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


def _raw_turn(api: OpenAI, messages: list[dict], text: str, *, stream: bool = False):
    """A turn through the raw response: (its headers, its usage)."""
    messages.append({"role": "user", "content": text})
    if stream:
        raw = api.chat.completions.with_raw_response.create(
            model="tiny", messages=messages, temperature=0, max_tokens=6, stream=True,
            stream_options={"include_usage": True})
        chunks = list(raw.parse())
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        used = chunks[-1].usage
    else:
        raw = api.chat.completions.with_raw_response.create(
            model="tiny", messages=messages, temperature=0, max_tokens=6)
        reply = raw.parse()
        content, used = reply.choices[0].message.content, reply.usage
    messages.append({"role": "assistant", "content": content})
    return raw.headers, used


def test_the_least_recently_used_go_first_said_in_the_log_and_to_the_next_turn(
        tiny, tmp_path, caplog):
    running = serve(tiny, tmp_path / "s.db", kv_budget_bytes=10**12)
    api = OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=60)
    talks: dict[str, list[dict]] = {"a": [], "b": [], "c": []}
    ids: dict[str, int] = {}
    try:
        for name in ("a", "b"):
            _turn(api, talks[name], f"Conversation {name} starts here.")
            ids[name] = running.conv.session.id
        _turn(api, talks["a"], "A goes on.")  # A is used more recently than B now
        running.service.kv_budget.limit_bytes = 1  # room for the session in use only
        with caplog.at_level(logging.INFO, logger="mlxchat.server.core.kv_budget"):
            _turn(api, talks["c"], "Conversation c is the third.")
        evicted = running.service.last_eviction
        assert evicted.sessions == [ids["b"], ids["a"]]  # least recently used first
        [said] = [r.getMessage() for r in caplog.records if r.name.endswith("kv_budget")]
        assert said.index(f"#{ids['b']} (") < said.index(f"#{ids['a']} (")
        assert "least recently used first" in said
        # B's next turn recomputes, and says why: in usage and in a header.
        headers, used = _raw_turn(api, talks["b"], "B comes back.", stream=True)
        reason = used.model_extra["cache_miss_reason"]
        assert "evicted" in reason and "--kv-budget" in reason
        assert headers["x-cache-miss"] == reason
        assert used.prompt_tokens_details.cached_tokens < used.prompt_tokens // 2
        headers, used = _raw_turn(api, talks["a"], "A comes back.")  # asked for whole
        assert "evicted" in used.model_extra["cache_miss_reason"]
        assert "evicted" in headers["x-cache-miss"]
        # Said once: A's following turn is an ordinary one.
        headers, used = _raw_turn(api, talks["a"], "A again.")
        assert "x-cache-miss" not in headers and "cache_miss_reason" not in used.model_extra
        assert used.prompt_tokens_details.cached_tokens > used.prompt_tokens // 2
    finally:
        running.stop()
