"""A session left idle after a turn has its KV segment files joined into one
(a reopen reads one file per branch); a turn still running is never joined
under."""

from __future__ import annotations

from mlxchat.store import open_store

from .app_support import ready, send, settle, tiny_app, until


def branch_files(db, session_id: int) -> list[str]:
    store = open_store(db)
    try:
        leaf = store.get_session(session_id).leaf_id
        return [r.path for r in store.segments.on_branch(leaf)]
    finally:
        store.close()


async def turns(pilot, *texts: str) -> int:
    """Send each text and wait for its reply; the session's id."""
    await ready(pilot)
    for text in texts:
        await send(pilot, text)
    return pilot.app.conversation.session.id


async def test_an_idle_session_has_its_segments_joined(tmp_path, tiny):
    # The timer is far off (tests/tui/conftest.py): it is fired by hand below.
    db = tmp_path / "s.db"
    app = tiny_app(db, tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        sid = await turns(pilot, "One.", "Two.", "Three.")
        files = branch_files(db, sid)
        assert len(files) == 3 and len(set(files)) == 3  # a segment file a turn, not joined yet
        # The timer the last turn set fires: the session is idle.
        app.compaction.timer.stop()
        app.compaction.if_idle()
        await settle(pilot)
        joined = branch_files(db, sid)
        assert len(joined) == 3 and len(set(joined)) == 1  # rows kept, one file for them
        # The next turn still reuses its cache and writes its own segment after it.
        await send(pilot, "Four.")
        assert app.conversation.turns.last_stats.reused_tokens > 0
        assert len(set(branch_files(db, sid))) == 2


async def test_nothing_is_joined_while_a_turn_runs(tmp_path, tiny):
    db = tmp_path / "s.db"
    app = tiny_app(db, tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        sid = await turns(pilot, "One.", "Two.")
        app.generating = True  # as while a reply streams
        app.compaction.if_idle()
        await settle(pilot)
        assert len(set(branch_files(db, sid))) == 2
        app.generating = False


async def test_the_timer_a_turn_sets_joins_them(tmp_path, tiny, monkeypatch):
    monkeypatch.setattr("mlxchat.session.compaction.IDLE_JOIN_S", 0.2)
    db = tmp_path / "s.db"
    app = tiny_app(db, tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        sid = await turns(pilot, "One.", "Two.")
        await until(lambda: len(set(branch_files(db, sid))) == 1, 30)
        assert len(branch_files(db, sid)) == 2
