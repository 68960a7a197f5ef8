"""Branches: an edit or a retry adds a branch; nothing is lost; forks copy a branch."""

from __future__ import annotations

import sqlite3

import pytest

from mlxchat.store import SessionStore, StoreError


def _contents(store: SessionStore, session_id: int) -> list[str]:
    return [m.content for m in store.get_session(session_id).messages]


@pytest.fixture
def chat(store: SessionStore) -> tuple[int, list[int]]:
    s = store.create_session("m")
    ids = [
        store.add_message(s.id, role, text).id
        for role, text in [("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")]
    ]
    return s.id, ids  # type: ignore[return-value]


def test_edit_makes_a_branch_and_the_old_one_stays(store: SessionStore, chat) -> None:
    sid, (q1, a1, q2, a2) = chat
    # /edit of q2: the new user message branches after a1.
    store.branches.set_leaf(sid, a1)
    edited = store.add_message(sid, "user", "q2 edited")
    reply = store.add_message(sid, "assistant", "a2'")
    assert edited.parent_id == a1
    assert _contents(store, sid) == ["q1", "a1", "q2 edited", "a2'"]
    infos = store.branches.of(sid)
    assert [(b.leaf_id, b.message_count, b.preview, b.current) for b in infos] == [
        (a2, 4, "q2", False),
        (reply.id, 4, "q2 edited", True),
    ]
    store.branches.switch(sid, a2)
    assert _contents(store, sid) == ["q1", "a1", "q2", "a2"]
    # Switching by an inner message picks the newest branch through it.
    store.branches.switch(sid, a1)
    assert store.get_session(sid).leaf_id == reply.id
    assert len(store.all_messages(sid)) == 6


def test_retry_keeps_both_replies(store: SessionStore, chat) -> None:
    sid, (q1, a1, q2, a2) = chat
    retry = store.add_message(sid, "assistant", "a2 again", parent_id=q2)
    assert store.branch_path(retry.id)[-2].id == q2
    assert {b.leaf_id for b in store.branches.of(sid)} == {a2, retry.id}


def test_each_branch_names_the_message_where_it_diverges(store: SessionStore, chat) -> None:
    sid, (q1, a1, q2, a2) = chat
    single = store.branches.of(sid)
    assert [(b.diverges_at, b.preview) for b in single] == [(q1, "q1")]  # one branch: its start
    retry = store.add_message(sid, "assistant", "a2 again", parent_id=q2)
    store.branches.set_leaf(sid, a1)
    edited = store.add_message(sid, "user", "q2 edited")
    infos = store.branches.of(sid)
    assert [(b.leaf_id, b.diverges_at, b.diverge_role, b.preview) for b in infos] == [
        (a2, a2, "assistant", "a2"),
        (retry.id, retry.id, "assistant", "a2 again"),
        (edited.id, edited.id, "user", "q2 edited"),
    ]
    assert store.branches.leaves_holding(sid, q2) == [a2, retry.id]
    assert store.branches.leaves_holding(sid, q1) == [a2, retry.id, edited.id]
    assert store.branches.leaves_holding(sid, edited.id) == [edited.id]


def test_an_undo_position_is_no_branch_of_its_own(store: SessionStore, chat) -> None:
    """/undo moves the position back inside the one branch there is: listing
    that ancestor as a second branch said there was an alternative."""
    sid, (q1, a1, q2, a2) = chat
    session = store.branches.set_leaf(sid, a1)
    assert [m.content for m in session.messages] == ["q1", "a1"]
    infos = store.branches.of(sid)
    assert [(b.leaf_id, b.current, b.diverges_at) for b in infos] == [(a2, False, q1)]
    assert store.branches.set_leaf(sid, None).messages == []


def test_branch_navigation_rejects_foreign_or_missing_messages(store: SessionStore, chat) -> None:
    sid, ids = chat
    other = store.create_session("m")
    with pytest.raises(StoreError):
        store.branches.switch(other.id, ids[0])
    with pytest.raises(StoreError):
        store.branches.set_leaf(sid, 12345)
    with pytest.raises(StoreError, match="no message"):
        store.branch_path(12345)


def test_messages_are_never_updated_in_place(store: SessionStore, chat, db_path) -> None:
    sid, ids = chat
    before = (
        sqlite3.connect(db_path)
        .execute("SELECT id, parent_id, role, content FROM messages")
        .fetchall()
    )
    store.branches.set_leaf(sid, ids[0])
    store.add_message(sid, "assistant", "other answer")
    store.rename_session(sid, "renamed")
    after = (
        sqlite3.connect(db_path)
        .execute("SELECT id, parent_id, role, content FROM messages")
        .fetchall()
    )
    assert after[: len(before)] == before and len(after) == len(before) + 1


def test_fork_copies_the_branch_into_a_new_session(store: SessionStore, chat) -> None:
    sid, (q1, a1, q2, a2) = chat
    store.rename_session(sid, "Original")
    fork = store.branches.fork(sid, at_message_id=a1)
    assert fork.id != sid and fork.title == "Original (fork)"
    assert [m.content for m in fork.messages] == ["q1", "a1"]
    assert {m.id for m in fork.messages}.isdisjoint({q1, a1})
    assert (
        fork.leaf_id == fork.messages[-1].id and fork.messages[1].parent_id == fork.messages[0].id
    )
    store.add_message(fork.id, "user", "only in the fork")
    assert _contents(store, sid) == ["q1", "a1", "q2", "a2"]
    whole = store.branches.fork(sid)
    assert [m.content for m in whole.messages] == ["q1", "a1", "q2", "a2"]
    # Deleting the original leaves the fork intact.
    store.delete_session(sid)
    assert _contents(store, fork.id) == ["q1", "a1", "only in the fork"]


def test_fork_of_an_empty_session(store: SessionStore) -> None:
    s = store.create_session("m", "sys")
    fork = store.branches.fork(s.id)
    assert fork.messages == [] and fork.system_prompt == "sys"
