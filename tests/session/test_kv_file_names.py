"""KV files never collide, whatever shares the data folder: two databases name
theirs apart, a write never replaces a file already there, a join removes
nothing it could not replace nor another database's files, and files named
before names carried a database's tag keep restoring."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from mlxchat import paths
from mlxchat.engine.core import ChatEngine
from mlxchat.store import kv_names, open_store
from tests.engine.conftest import GREEDY, conversation, run
from tests.session.test_compaction import QUESTIONS, files_named, last, make


def _identity(path: Path) -> tuple[int, int, bytes]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, path.read_bytes()


def test_two_databases_in_one_data_folder_never_overwrite_each_others_segments(tiny, tmp_path):
    first = make(tiny, tmp_path / "a.db")
    for q in QUESTIONS:
        last(first.turns.send(q))
    mine = {p: _identity(paths.kv_file(p)) for p in files_named(first)}
    second = make(tiny, tmp_path / "b.db")  # the same session and message ids
    for q in QUESTIONS:
        last(second.turns.send(q))
    theirs = files_named(second)
    assert first.session.id == second.session.id and len(mine) == len(set(theirs)) == 3
    assert not set(mine) & set(theirs)
    assert {p: _identity(paths.kv_file(p)) for p in mine} == mine  # untouched
    done = first.cache.compact()
    assert (done.joined, done.written, done.warning) == (3, 1, None)
    assert all(paths.kv_file(p).is_file() for p in theirs)  # never the other one's to sweep
    sid, held = second.session.id, second.views.state().cached_tokens
    first.close()
    second.close(compact=False)
    again = make(tiny, tmp_path / "b.db")
    again.open_session(sid)
    assert again.cache.last_load.ok and again.cache.last_load.reason is None
    assert again.views.state().cached_tokens == held
    again.close()


def test_a_join_with_a_mismatching_file_removes_nothing_it_could_not_replace(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in QUESTIONS:
        last(conv.turns.send(q))
    rows = conv.store.segments.on_branch(conv.session.leaf_id)
    victim = paths.kv_file(rows[1].path)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes: as another writer's would be
    victim.write_bytes(bytes(data))
    # The name the join would take is held already, by a row of another session.
    taken = kv_names.joined(conv.store.segments.file_tag(), conv.session.id, rows[0].start,
                            rows[-1].end)
    (paths.kv_dir() / taken).write_bytes(b"not mine")
    other = conv.store.create_session("tiny")
    reply = conv.store.add_message(other.id, "assistant", "hi")
    conv.store.segments.record(other.id, reply.id, start=0, end=1, path=f"snapshots/{taken}",
                               checksum="x", file_bytes=8, kv_bits=None, token_ids=[1])
    before = {p.name: _identity(p) for p in paths.kv_dir().iterdir()}
    done = conv.cache.compact()
    assert (done.joined, done.written, done.removed) == (0, 0, 0)
    assert "segment 2: checksum mismatch" in done.warning
    assert {p.name: _identity(p) for p in paths.kv_dir().iterdir()} == before
    assert files_named(conv) == [r.path for r in rows]
    data[len(data) // 2] ^= 0xFF  # mended: the join goes through, under a name of its own
    victim.write_bytes(bytes(data))
    done = conv.cache.compact()
    assert (done.joined, done.written, done.removed, done.warning) == (3, 1, 3, None)
    [joined] = set(files_named(conv))
    assert Path(joined).name not in before and Path(joined).name.startswith(Path(taken).stem + "-")
    assert (paths.kv_dir() / taken).read_bytes() == b"not mine"
    conv.close(compact=False)


def test_a_name_already_present_on_disk_is_not_overwritten(tiny, tmp_path):
    engine = ChatEngine(tiny)
    try:
        run(engine, conversation(1), GREEDY)
        wanted = paths.ensure_private_dir(paths.kv_dir()) / "seg-taken.safetensors"
        wanted.write_bytes(b"another row's file")
        info = engine.save_segment(wanted, 0)
        again = engine.save_segment(wanted, 0)
    finally:
        engine.close()
    assert wanted.read_bytes() == b"another row's file"
    written = {Path(info.path), Path(again.path)}
    assert len(written) == 2 and wanted not in written
    assert all(p.parent == wanted.parent and p.name.startswith("seg-taken-") for p in written)
    assert all(p.stat().st_size == info.bytes for p in written)
    assert not [p for p in wanted.parent.iterdir() if p.name.endswith(".tmp.safetensors")]


def test_without_hard_links_a_taken_name_is_still_never_replaced(tiny, tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(1, "Operation not permitted")  # as FAT or an SMB share says

    engine = ChatEngine(tiny)
    try:
        run(engine, conversation(1), GREEDY)
        wanted = paths.ensure_private_dir(paths.kv_dir()) / "seg-taken.safetensors"
        monkeypatch.setattr(os, "link", no_links)
        free = engine.save_segment(wanted, 0)
        wanted.unlink()
        wanted.write_bytes(b"another row's file")
        fresh = engine.save_segment(wanted, 0)
    finally:
        engine.close()
    assert Path(free.path) == wanted != Path(fresh.path)
    assert wanted.read_bytes() == b"another row's file"
    assert Path(fresh.path).stat().st_size == fresh.bytes
    assert not [p for p in wanted.parent.iterdir() if p.name.endswith(".tmp.safetensors")]


def test_files_named_before_tags_keep_restoring_and_are_joined(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in QUESTIONS:
        last(conv.turns.send(q))
    sid, held = conv.session.id, conv.views.state().cached_tokens
    conv.close(compact=False)
    store = open_store(tmp_path / "s.db")
    rows = store.segments.on_branch(store.get_session(sid).leaf_id)
    store.close()
    with sqlite3.connect(tmp_path / "s.db") as db:  # named as an older mlxchat named them
        for r in rows:
            name = f"seg-{sid}-{r.message_id}-{r.start}-{r.end}.safetensors"
            paths.kv_file(r.path).rename(paths.kv_dir() / name)
            db.execute("UPDATE kv_segments SET path = ? WHERE id = ?", (f"snapshots/{name}", r.id))
    stray = paths.kv_dir() / f"seg-{sid}-99-0-1.safetensors"  # no row here names it
    stray.write_bytes(b"another database's, perhaps")
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    assert again.cache.last_load.ok and again.cache.last_load.reason is None
    assert again.views.state().cached_tokens == held
    done = again.cache.compact()
    assert (done.joined, done.written, done.removed, done.warning) == (3, 1, 3, None)
    [joined] = set(files_named(again))
    assert Path(joined).name.startswith(f"cmp-{again.store.segments.file_tag()}-")
    assert {p.name for p in paths.kv_dir().iterdir()} == {Path(joined).name, stray.name}
    again.close()
