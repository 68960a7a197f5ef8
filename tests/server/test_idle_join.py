"""``mlxchat serve`` joins a session's KV segment files once it has been idle
(as the app does), never in a request's time: a request arriving while a
session is being joined waits for that join and is answered as it would have
been without it; the join stops for it and goes on once the server is quiet."""

from __future__ import annotations

import threading

from openai import OpenAI

from mlxchat import paths
from mlxchat.session import compaction

from tests.server.conftest import serve
from tests.waiting import until


def client(running) -> OpenAI:
    return OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=60)


def say(api: OpenAI, messages: list[dict], text: str):
    messages.append({"role": "user", "content": text})
    reply = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                        max_tokens=4)
    messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    return reply


def files(running, session_id: int) -> tuple[int, int]:
    """(rows, distinct files) of the session's stored branch."""
    store = running.conv.store
    rows = store.segments.on_branch(store.get_session(session_id).leaf_id)
    return len(rows), len({r.path for r in rows})


def rotation(running) -> tuple[OpenAI, list[dict], list[dict], int, int]:
    """Conversations A and B taking turns, three each; their session ids."""
    api = client(running)
    a: list[dict] = []
    b: list[dict] = []
    say(api, a, "Conversation A starts here.")
    a_id = running.conv.session.id
    say(api, b, "Conversation B is another one.")
    b_id = running.conv.session.id
    for n in (2, 3):
        say(api, a, f"A, turn {n}.")
        say(api, b, f"B, turn {n}.")
    return api, a, b, a_id, b_id


def test_no_request_joins_files_and_an_idle_session_is_joined(tiny, tmp_path):
    busy = serve(tiny, tmp_path / "busy.db")  # the idle join far off
    try:
        _, _, _, a_id, b_id = rotation(busy)
        # Switching between sessions joined nothing in the requests' time (each
        # turn: its prompt's part and its reply's, ``CacheKeeper.prompt_apart``).
        assert files(busy, a_id) == (6, 6) and files(busy, b_id) == (6, 6)
    finally:
        busy.stop()
    busy_files = sorted(paths.kv_dir().iterdir())
    idle = serve(tiny, tmp_path / "idle.db", idle_join_s=0.2)
    try:
        api, a, _, a_id, b_id = rotation(idle)
        until(lambda: {s for s, _ in idle.service.idle_joins.joined} == {a_id, b_id})
        assert files(idle, a_id) == (6, 1) and files(idle, b_id) == (6, 1)
        joined = idle.conv.store.segments.on_branch(idle.conv.store.get_session(a_id).leaf_id)
        assert joined[0].path.startswith("snapshots/cmp-")
        # Each turn's span is kept, the rows point at the joined file, and the
        # old files are gone (the other database's, beside them, are not this one's).
        assert [r.start for r in joined[1:]] == [r.end for r in joined[:-1]]
        tag = idle.conv.store.segments.file_tag()
        assert sorted(p.name[:4] for p in paths.kv_dir().iterdir() if f"-{tag}-" in p.name) == [
            "cmp-", "cmp-"]
        others = sorted(p for p in paths.kv_dir().iterdir() if f"-{tag}-" not in p.name)
        assert others == busy_files
        again = say(api, a, "A, turn 4.")  # restored from the joined file
        assert again.usage.prompt_tokens_details.cached_tokens == joined[-1].end
        assert files(idle, a_id) == (8, 3)
    finally:
        idle.stop()


def test_a_request_arriving_mid_join_waits_for_it_and_is_answered_as_without(
        tiny, tmp_path, monkeypatch):
    reference = serve(tiny, tmp_path / "ref.db")
    try:
        api, a, _, _, _ = rotation(reference)
        expected = say(api, a, "A, turn 4.")
    finally:
        reference.stop()

    real = compaction.compact_saved
    started, go = threading.Event(), threading.Event()
    order: list[tuple[int, bool]] = []
    answered = threading.Event()

    def paused(store, session_id, refs, *, holder):
        order.append((session_id, answered.is_set()))
        if len(order) == 1:
            started.set()
            go.wait(30)
        return real(store, session_id, refs, holder=holder)

    monkeypatch.setattr(compaction, "compact_saved", paused)
    running = serve(tiny, tmp_path / "s.db", idle_join_s=0.2)
    try:
        api, a, _, a_id, b_id = rotation(running)
        assert started.wait(30)  # A, idle longest, is being joined
        got: list = []
        asking = threading.Thread(target=lambda: (got.append(say(api, a, "A, turn 4.")),
                                                  answered.set()))
        asking.start()
        until(lambda: running.service.lane.waiting == 1)  # it waits for the join
        assert not answered.wait(0.3)
        go.set()
        asking.join(30)
        reply = got[0]
        assert reply.choices[0].message.content == expected.choices[0].message.content
        assert reply.usage.prompt_tokens == expected.usage.prompt_tokens
        assert (reply.usage.prompt_tokens_details.cached_tokens
                == expected.usage.prompt_tokens_details.cached_tokens)
        # A was joined before its request ran; B's join waited for the request.
        until(lambda: len(order) == 2)
        assert order == [(a_id, False), (b_id, True)]
        until(lambda: files(running, b_id) == (6, 1))
        assert files(running, a_id) == (8, 3)  # joined, then the new turn's segments
    finally:
        go.set()
        running.stop()
