"""Images stored once by their hash (0600) and referenced from messages
(schema 17); a database of version 16 reads on, its messages showing none."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mlxchat import paths
from mlxchat.chat import Message
from mlxchat.store import open_store
from mlxchat.store.image_files import store_image

from tests.store.old_versions import database_at


def test_an_image_is_stored_once_by_its_hash_and_private(tmp_path):
    src = tmp_path / "cat.png"
    src.write_bytes(b"\x89PNG not really, but bytes")
    first = store_image(src, width=3, height=2)
    second = store_image(src, name="again.png")
    assert first.digest == second.digest and first.path == second.path
    kept = Path(first.path)
    assert kept.parent == paths.images_dir() and kept.read_bytes() == src.read_bytes()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert [p.name for p in paths.images_dir().iterdir()] == [first.digest]
    assert (first.name, second.name, first.width) == ("cat.png", "again.png", 3)


def test_messages_keep_their_images_in_order(db_path, tmp_path):
    refs = []
    for i in range(2):
        (tmp_path / f"{i}.png").write_bytes(bytes([i]) * 10)
        refs.append(store_image(tmp_path / f"{i}.png", width=10 + i, height=5))
    store = open_store(db_path)
    s = store.create_session("m")
    store.add_messages(s.id, [Message("user", "look", images=tuple(reversed(refs)))])
    store.add_message(s.id, "assistant", "seen")
    got = store.get_session(s.id).messages
    assert got[0].images == tuple(reversed(refs)) and got[1].images == ()
    store.close()


def test_a_version_16_database_reads_on(tmp_path):
    path = tmp_path / "v16.db"
    conn = database_at(path, 16)
    conn.execute("INSERT INTO sessions (id, title, created, updated) VALUES (1, 'old', 1, 1)")
    conn.execute("INSERT INTO messages (id, session_id, role, content, created) "
                 "VALUES (1, 1, 'user', 'from before images', 2)")
    conn.execute("UPDATE sessions SET leaf_id = 1")
    conn.close()
    store = open_store(path)
    (old,) = store.get_session(1).messages
    assert (old.content, old.images) == ("from before images", ())
    store.close()
    assert os.path.exists(path)
