"""An agent that sends its replies back changed (a replayed session, a client
that rewrites the assistant's turn) forks each conversation at the reply:
the prompt's part of the KV is kept on disk apart from the reply's, so after
another conversation took the cache, or after a restart, the next step
restores it and prefills only what it adds."""

from __future__ import annotations

from anthropic import Anthropic

from tests.server.conftest import serve

TASK = "Find where the KV cache is saved and restored, and explain it. " * 6


def _ask(url: str, messages: list):
    api = Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120)
    return api.messages.create(model="tiny", max_tokens=4, messages=messages,
                               extra_body={"temperature": 0})


def _total(usage) -> int:
    return usage.input_tokens + usage.cache_read_input_tokens


def _step(n: int) -> list:
    """A step as the agent writes it: its own words for the reply, then more."""
    return [{"role": "assistant", "content": f"Step {n}: I will read file number {n}."},
            {"role": "user", "content": f"Here is file {n}: " + "def f(x): return x + 1\n" * 8}]


def test_a_forked_step_prefills_only_its_new_tokens_after_a_switch_and_a_restart(tiny,
                                                                                   tmp_path):
    db = tmp_path / "s.db"
    main = [{"role": "user", "content": TASK}]
    served = serve(tiny, db)
    try:
        first = _ask(served.url, main)
        main += _step(1)
        second = _ask(served.url, main)
        assert second.usage.cache_read_input_tokens == _total(first.usage)  # the live cache
        _ask(served.url, [{"role": "user", "content": "Another agent's task, unrelated."}])
        main += _step(2)
        third = _ask(served.url, main)
        # The other conversation had the cache: this one's came back from disk.
        assert third.usage.cache_read_input_tokens == _total(second.usage)
        assert served.conv.turns.last_stats.cache_source == "snapshot"
    finally:
        served.stop()
    again = serve(tiny, db)
    try:
        main += _step(3)
        fourth = _ask(again.url, main)
        assert fourth.usage.cache_read_input_tokens == _total(third.usage)
        assert fourth.usage.input_tokens == _total(fourth.usage) - _total(third.usage)
    finally:
        again.stop()
