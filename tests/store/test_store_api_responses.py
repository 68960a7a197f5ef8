"""Responses the HTTP API stored (schema 20): kept by id with the reply they
ended with, gone with that reply or its session, and a key of the database's
own, drawn once (also by an older database as it migrates)."""

from __future__ import annotations

from pathlib import Path

from mlxchat.store import SessionStore, open_store
from tests.store.old_versions import database_at


def _reply(store: SessionStore) -> tuple[int, int]:
    s = store.create_session("m")
    store.add_message(s.id, "user", "hi")
    reply = store.add_message(s.id, "assistant", "hello")
    assert s.id is not None and reply.id is not None
    return s.id, reply.id


def test_a_response_is_kept_by_id_and_deleted_once(store: SessionStore) -> None:
    session_id, reply_id = _reply(store)
    store.responses.add("resp_1", session_id, reply_id, {"id": "resp_1", "output": []},
                        [{"type": "message", "role": "user", "content": "hi"}])
    found = store.responses.get("resp_1")
    assert found is not None
    assert (found.session_id, found.message_id, found.body["id"]) == (session_id, reply_id,
                                                                       "resp_1")
    assert found.input == [{"type": "message", "role": "user", "content": "hi"}]
    assert store.responses.left_in(session_id) == 1
    assert store.responses.delete("resp_1") == found
    assert store.responses.get("resp_1") is None and store.responses.delete("resp_1") is None
    assert store.responses.left_in(session_id) == 0
    assert len(store.get_session(session_id).messages) == 2  # the conversation stays


def test_a_response_goes_with_its_session(store: SessionStore) -> None:
    session_id, reply_id = _reply(store)
    store.responses.add("resp_2", session_id, reply_id, {}, [])
    store.delete_session(session_id)
    assert store.responses.get("resp_2") is None


def test_the_key_is_drawn_once_per_database(tmp_path: Path) -> None:
    a, b = open_store(tmp_path / "a.db"), open_store(tmp_path / "b.db")
    keys = a.responses.key(), b.responses.key()
    a.close()
    b.close()
    assert len(keys[0]) == 32 and keys[0] != keys[1]
    again = open_store(tmp_path / "a.db")
    assert again.responses.key() == keys[0]
    again.close()


def test_a_version_19_database_gets_the_table_and_a_key(tmp_path: Path) -> None:
    database_at(tmp_path / "old.db", 19).close()
    store = open_store(tmp_path / "old.db")
    session_id, reply_id = _reply(store)
    store.responses.add("resp_3", session_id, reply_id, {}, [])
    assert store.responses.get("resp_3") is not None and len(store.responses.key()) == 32
    store.close()
