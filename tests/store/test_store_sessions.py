"""Sessions and messages: create, read, find, list, rename, settings, delete."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.generation import GenerationSettings
from mlxchat.store import SessionStore, StoreError, title_from
from mlxchat.turn_stats import TurnStats

from tests.old_snapshots import record_old_snapshot


def test_create_and_get_round_trip(store: SessionStore) -> None:
    settings = GenerationSettings(temperature=0.2, max_tokens=64, seed=7, kv_bits=8)
    s = store.create_session("smollm2-135m", "Be brief.", settings)
    got = store.get_session(s.id)
    assert (got.model, got.system_prompt, got.settings) == ("smollm2-135m", "Be brief.", settings)
    assert (
        got.title == "New chat"
        and not got.title_locked
        and got.messages == []
        and got.leaf_id is None
    )


def test_add_message_moves_leaf_and_keeps_every_field(store: SessionStore) -> None:
    s = store.create_session("m")
    u = store.add_message(s.id, "user", "hi", token_count=3)
    stats = TurnStats(
        ttft_s=0.5, decode_tps=12.5, generated_tokens=4, cache_source="warm", kv_bits=4
    )
    a = store.add_message(s.id, "assistant", "hel", stats=stats, cancelled=True)
    assert a.parent_id == u.id and u.parent_id is None
    got = store.get_session(s.id)
    assert got.leaf_id == a.id
    assert [(m.role, m.content) for m in got.messages] == [("user", "hi"), ("assistant", "hel")]
    assert got.messages[0].token_count == 3
    assert got.messages[1].stats == stats and got.messages[1].cancelled


def test_add_message_rejects_bad_role_foreign_parent_and_missing_session(
    store: SessionStore,
) -> None:
    s1, s2 = store.create_session("m"), store.create_session("m")
    other = store.add_message(s2.id, "user", "x")
    with pytest.raises(StoreError, match="role"):
        store.add_message(s1.id, "robot", "x")  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="not part of session"):
        store.add_message(s1.id, "user", "x", parent_id=other.id)
    with pytest.raises(StoreError, match="no session #999"):
        store.add_message(999, "user", "x")
    assert store.get_session(s1.id).messages == []


def test_title_follows_first_user_message_until_renamed(store: SessionStore) -> None:
    s = store.create_session("m")
    store.add_message(s.id, "system", "ignored for titles")
    store.add_message(s.id, "user", "\n  How do   I bake bread?\nwith details")
    assert store.get_session(s.id).title == "How do I bake bread?"
    store.add_message(s.id, "user", "second question")
    assert store.get_session(s.id).title == "How do I bake bread?"
    renamed = store.rename_session(s.id, "  Bread  ")
    assert renamed.title == "Bread" and renamed.title_locked
    store.branches.set_leaf(s.id, None)
    store.add_message(s.id, "user", "a new first message")
    assert store.get_session(s.id).title == "Bread"
    with pytest.raises(StoreError, match="empty"):
        store.rename_session(s.id, " \n ")


def test_editing_the_first_message_retitles_an_unlocked_session(store: SessionStore) -> None:
    s = store.create_session("m")
    store.add_message(s.id, "user", "typo questoin")
    store.branches.set_leaf(s.id, None)
    store.add_message(s.id, "user", "fixed question")
    assert store.get_session(s.id).title == "fixed question"


def test_attached_files_do_not_title_the_session(store: SessionStore) -> None:
    from mlxchat.chat import attachment_block

    s = store.create_session("m")
    note = attachment_block("note.txt", "Line one\nLine two")
    store.add_message(s.id, "user", f"{note}\n\nSummarise this please")
    assert store.get_session(s.id).title == "Summarise this please"
    bare = store.create_session("m")
    other = attachment_block("b.md", "# B")
    store.add_message(bare.id, "user", f"{note}\n\n{other}")
    assert store.get_session(bare.id).title == "note.txt, b.md"
    assert title_from('<file name="x">unclosed') == '<file name="x">unclosed'


def test_title_from_cuts_long_lines_at_a_word() -> None:
    title = title_from("word " * 40)
    assert len(title) <= 60 and title.endswith("…") and "  " not in title
    assert title_from("") == "" and title_from("\x00\x1b[31mred") == "[31mred"


def test_find_session_by_id_title_and_prefix(store: SessionStore) -> None:
    a = store.create_session("m", title="Rust lifetimes")
    b = store.create_session("m", title="Rust macros")
    c = store.create_session("m", title="Python")
    assert store.find_session(str(a.id)).id == a.id
    assert store.find_session(f"#{b.id}").id == b.id
    assert store.find_session("python").id == c.id
    assert store.find_session("rust m").id == b.id
    with pytest.raises(StoreError) as err:
        store.find_session("rust")
    assert "matches 2 sessions" in str(err.value) and "Rust macros" in str(err.value)
    with pytest.raises(StoreError, match="No session matches"):
        store.find_session("golang")
    with pytest.raises(StoreError, match="No session matches"):
        store.find_session("")
    with pytest.raises(StoreError, match="No session matches"):
        store.find_session("9" * 40)


def test_most_recent_and_list_sessions(store: SessionStore) -> None:
    assert store.most_recent_session() is None and store.list_sessions() == []
    a = store.create_session("m")
    b = store.create_session("m")
    store.add_message(a.id, "user", "one")
    store.add_message(a.id, "assistant", "two")
    assert store.most_recent_session().id == a.id  # type: ignore[union-attr]
    rows = store.list_sessions()
    assert [r.id for r in rows] == [a.id, b.id]
    assert rows[0].message_count == 2 and rows[0].title == "one" and rows[0].snippet == ""
    assert [r.id for r in store.list_sessions(limit=1)] == [a.id]


def test_metadata_updates(store: SessionStore) -> None:
    s = store.create_session("m", "old prompt")
    store.update_model(s.id, "other-model")
    store.update_system_prompt(s.id, None)
    store.update_session_settings(s.id, GenerationSettings(temperature=0.0, context_policy="stop"))
    got = store.get_session(s.id)
    assert got.model == "other-model" and got.system_prompt is None
    assert got.settings.temperature == 0.0 and got.settings.context_policy == "stop"


def test_delete_session_removes_everything(store: SessionStore, tmp_path) -> None:
    s = store.create_session("m")
    keep = store.create_session("m")
    u = store.add_message(s.id, "user", "secret words")
    store.add_message(keep.id, "user", "other words")
    record_old_snapshot(store, s.id, u.id, paths.kv_dir() / "a.safetensors",
                        sha256="x", token_count=5, file_bytes=10, mlx_lm_version="0.32.0")
    assert store.delete_session(s.id) == [paths.kv_dir().resolve() / "a.safetensors"]
    with pytest.raises(StoreError):
        store.get_session(s.id)
    assert store.list_sessions(search="secret") == []
    assert [r.id for r in store.list_sessions()] == [keep.id]
    assert store.snapshots.referenced_paths() == set()
    with pytest.raises(StoreError):
        store.delete_session(s.id)
    # Ids are never reused, so a stale id cannot reach another session.
    assert store.create_session("m").id > s.id


def test_store_is_usable_from_another_thread(store: SessionStore) -> None:
    import threading

    s = store.create_session("m")
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            store.add_message(s.id, "user", "from a thread")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert not errors and store.get_session(s.id).messages[0].content == "from a thread"


def test_a_leftover_draft_becomes_a_stopped_reply(tmp_path: Path) -> None:
    from mlxchat.store import open_store

    store = open_store(tmp_path / "d.db")
    session = store.create_session("m")
    user = store.add_message(session.id, "user", "tell me a story")
    store.drafts.save(session.id, user.id, "Once upon")
    store.drafts.save(session.id, user.id, "Once upon a time")
    store.close()
    store = open_store(tmp_path / "d.db")
    recovered = store.drafts.recover(session.id)
    assert recovered is not None and recovered.cancelled and recovered.parent_id == user.id
    msgs = store.get_session(session.id).messages
    assert [(m.role, m.content, m.cancelled) for m in msgs] == [
        ("user", "tell me a story", False), ("assistant", "Once upon a time", True)]
    assert store.drafts.recover(session.id) is None  # recovered once


def test_a_draft_killed_while_reasoning_keeps_its_reasoning(tmp_path: Path) -> None:
    from mlxchat.store import open_store

    store = open_store(tmp_path / "d.db")
    session = store.create_session("m")
    user = store.add_message(session.id, "user", "why?")
    store.drafts.save(session.id, user.id, "", "Let me think about")
    store.close()
    store = open_store(tmp_path / "d.db")
    recovered = store.drafts.recover(session.id)
    assert recovered is not None and recovered.cancelled
    stored = store.get_session(session.id).messages[-1]
    assert (stored.content, stored.reasoning) == ("", "Let me think about")


def test_a_finished_reply_clears_its_draft(tmp_path: Path) -> None:
    from mlxchat.store import open_store

    store = open_store(tmp_path / "d.db")
    session = store.create_session("m")
    user = store.add_message(session.id, "user", "q")
    store.drafts.save(session.id, user.id, "partial")
    store.add_message(session.id, "assistant", "the whole reply")
    assert store.drafts.recover(session.id) is None
    assert [m.content for m in store.get_session(session.id).messages] == ["q", "the whole reply"]


def test_a_titled_session_is_found_or_created_once(tmp_path: Path) -> None:
    """Two processes asking for the same new title (two `ask --session A` at
    once) get one session: the lookup and the insert are one transaction."""
    from mlxchat.store import open_store

    first, second = open_store(tmp_path / "s.db"), open_store(tmp_path / "s.db")
    try:
        made, created = first.titled_session("A", "tiny")
        found, again = second.titled_session("A", "tiny")
        assert created and not again and found.id == made.id and found.title_locked
        assert [s.title for s in first.list_sessions()] == ["A"]
        first.create_session("tiny", title="A")  # two now: refused, nothing created
        with pytest.raises(StoreError, match="matches 2 sessions"):
            second.titled_session("A", "tiny")
        assert len(second.list_sessions()) == 2
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("stats", ["not json", "[1, 2]"])
def test_a_stop_on_a_reply_with_unreadable_stats_still_marks_it(store: SessionStore,
                                                                stats: str) -> None:
    session = store.create_session("t", "m")
    store.add_message(session.id, "user", "hi")
    reply = store.add_message(session.id, "assistant", "he", cancelled=True, token_ids=[1, 2])
    with store.db.writing() as cur:
        cur.execute("UPDATE messages SET stats = ? WHERE id = ?", (stats, reply.id))
    store.mark_stopped(reply.id, token_ids=[1])
    stored = store.branch_path(reply.id)[-1]
    assert not stored.cancelled and stored.token_ids == [1]
    assert stored.stats is not None and stored.stats.finish_reason == "stop"
