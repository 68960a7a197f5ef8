"""The same turn sent again (a client's "regenerate": a sibling of the reply
it had) trims the live cache back instead of reading the branch's KV from
disk: it reuses exactly what a server keeping no files at all reuses (whose
only way back is the trim), and more than the files would give."""

from __future__ import annotations

from openai import OpenAI

from tests.server.conftest import serve


def regenerate(tiny, db, *, keep_snapshots: bool):
    """Two turns, then the second sent again; (its reply, the turn's stats, the load)."""
    running = serve(tiny, db, keep_snapshots=keep_snapshots)
    api = OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=60)
    try:
        messages = [{"role": "user", "content": "Tell me about rivers."}]
        first = api.chat.completions.create(model="tiny", messages=messages, max_tokens=6)
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And about the sea, please."}]
        api.chat.completions.create(model="tiny", messages=messages, max_tokens=6)
        again = api.chat.completions.create(model="tiny", messages=messages, max_tokens=6)
        store = running.conv.store
        on_disk = store.segments.on_branch(running.conv.session.leaf_id)
        return again, running.conv.turns.last_stats, running.conv.cache.last_load, on_disk
    finally:
        running.stop()


def test_the_same_turn_again_trims_the_live_cache_instead_of_reading_the_disk(tiny, tmp_path):
    trimmed, trim_stats, _, _ = regenerate(tiny, tmp_path / "none.db", keep_snapshots=False)
    again, stats, load, rows = regenerate(tiny, tmp_path / "files.db", keep_snapshots=True)
    assert load is not None and load.from_live
    assert stats.cache_source == trim_stats.cache_source == "warm"
    assert again.usage.prompt_tokens == trimmed.usage.prompt_tokens
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached == trimmed.usage.prompt_tokens_details.cached_tokens
    assert stats.prefilled_tokens == trim_stats.prefilled_tokens == again.usage.prompt_tokens \
        - cached
    # The files hold the first exchange only: reading them would have reused less.
    assert cached > rows[0].end
    assert again.choices[0].message.content == trimmed.choices[0].message.content
