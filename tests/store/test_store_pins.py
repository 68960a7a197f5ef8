"""Pins per session and the prefix files they share: a file is returned for
deletion in the transaction that drops the last pin naming its prefix."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.chat import Pin
from mlxchat.store import PrefixRecord, SessionStore, StoreError


def _prefix(key: str) -> PrefixRecord:
    return PrefixRecord(key, f"snapshots/prefix-{key}.safetensors", "0badf00d", [1, 2, 3],
                        1234, None)


def _file(key: str) -> Path:
    return paths.kv_dir().resolve() / f"prefix-{key}.safetensors"


def test_pins_keep_their_order_and_a_fork_keeps_them(store: SessionStore, home: Path) -> None:
    s = store.create_session("m", "sys")
    pins = [Pin("b.md", "/x/b.md", "bee", 3, "k1"), Pin("a.md", "/x/a.md", "ay", 2, "k1")]
    session, files = store.pins.replace(s.id, pins)
    assert session.pins == pins and files == []
    assert store.get_session(s.id).pins == pins
    assert store.list_sessions()[0].pins == 2
    store.add_message(s.id, "user", "hi")
    fork = store.branches.fork(s.id)
    assert fork.pins == pins
    users = store.pins.sessions_pinning(pins[0].text_hash)
    assert [u.session_id for u in users] == [s.id, fork.id]


def test_a_prefix_goes_when_no_session_pins_it(store: SessionStore, home: Path) -> None:
    a, b = store.create_session("m"), store.create_session("m")
    doc = Pin("d.md", "/d.md", "text", 1, "k1")
    store.pins.replace(a.id, [doc])
    store.pins.replace(b.id, [doc])
    assert store.prefixes.record(_prefix("k1")) == []
    assert store.prefixes.record(_prefix("orphan")) == [_file("orphan")]  # no pin names it
    assert store.prefixes.get("orphan") is None and store.prefixes.get("k1").token_ids == [1, 2, 3]
    assert store.delete_session(a.id) == []  # b still pins it
    _, files = store.pins.replace(b.id, [])
    assert files == [_file("k1")] and store.prefixes.get("k1") is None


def test_deleting_the_last_session_returns_its_prefix_file(store: SessionStore,
                                                            home: Path) -> None:
    a = store.create_session("m")
    store.pins.replace(a.id, [Pin("d.md", "/d.md", "text", 1, "k2")])
    store.prefixes.record(_prefix("k2"))
    assert _file("k2") in store.delete_session(a.id)
    assert store.prefixes.get("k2") is None


def test_pinned_documents_travel_with_an_export(store: SessionStore, home: Path) -> None:
    """A JSON export carries the pinned documents' texts; the import pins them
    again (its KV prefix is this machine's to compute); Markdown names them."""
    import json

    from mlxchat.store.export import session_document, session_markdown
    from mlxchat.store.importing import import_json

    s = store.create_session("m", "sys")
    pins = [Pin("b.md", "/x/b.md", "bee\nline two", 3, "k1"), Pin("a.md", "/x/a.md", "ay", 2, "k1")]
    store.pins.replace(s.id, pins)
    store.add_message(s.id, "user", "hi")
    text = json.dumps(session_document(store, s.id))
    again = import_json(store, text)
    assert [(p.name, p.path, p.text, p.tokens) for p in again.pins] == \
        [(p.name, p.path, p.text, p.tokens) for p in pins]
    assert all(p.prefix_key is None for p in again.pins)
    assert "**Pinned document:** b.md (3 tokens" in session_markdown(store.get_session(s.id))
    doc = json.loads(text)
    doc["session"]["pins"].append(dict(doc["session"]["pins"][0]))
    with pytest.raises(StoreError, match="share a name"):
        import_json(store, json.dumps(doc))
