"""Twenty conversations taking turns through the real server with the
``openai`` client: each turn finds its own conversation's KV on disk (the
live cache holds the one before it) and prefills only its new message."""

from __future__ import annotations

from openai import OpenAI

from tests.server.conftest import serve

CONVERSATIONS = 20
ROUNDS = 3


def test_twenty_conversations_in_rotation_each_reuse_their_own_cache(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", max_tokens=3)
    api = OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=60)
    store = running.conv.store
    talks: list[list[dict]] = [[] for _ in range(CONVERSATIONS)]
    sessions: list[int] = []
    try:
        for turn in range(ROUNDS):
            for n, messages in enumerate(talks):
                # What this conversation's files hold now (read from the store).
                held = 0
                if turn:
                    leaf = store.get_session(sessions[n]).leaf_id
                    held = store.segments.on_branch(leaf)[-1].end
                messages.append({"role": "user",
                                 "content": f"Conversation {n}, turn {turn}: go on."})
                reply = api.chat.completions.create(model="tiny", messages=messages,
                                                    max_tokens=3, temperature=0)
                messages.append({"role": "assistant",
                                 "content": reply.choices[0].message.content})
                if not turn:
                    sessions.append(running.conv.session.id)
                    continue
                assert running.conv.session.id == sessions[n]
                assert held > 0
                assert reply.usage.prompt_tokens_details.cached_tokens == held
                stats = running.conv.turns.last_stats
                assert stats.cache_source == "snapshot"  # from disk, not recomputed
                assert stats.prefilled_tokens == reply.usage.prompt_tokens - held
        assert len(set(sessions)) == CONVERSATIONS
    finally:
        running.stop()
