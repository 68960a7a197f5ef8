"""A branch's KV segment files are joined into one when the session is left;
what it restores stays exactly what it was, branches keep sharing their
files, a damaged joined file falls back as a damaged segment does, and a
file that is not a regular file never blocks a reader."""

from __future__ import annotations

import os
from pathlib import Path

from mlxchat import paths
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

QUESTIONS = ("One.", "Two?", "Three!")


def make(tiny, db: Path) -> Conversation:
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 8
    return Conversation(settings=settings, store=open_store(db), engine=ChatEngine(tiny),
                        model_spec="tiny")


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


def files_named(conv: Conversation) -> list[str]:
    return [r.path for r in conv.store.segments.on_branch(conv.session.leaf_id)]


def on_disk() -> set[str]:
    return {p.name for p in paths.kv_dir().iterdir()}


def warm_answer(tiny, db: Path, questions: tuple[str, ...], next_question: str) -> list[int]:
    warm = make(tiny, db)
    for q in questions:
        last(warm.turns.send(q))
    ids = last(warm.turns.send(next_question)).token_ids
    warm.close(compact=False)
    return ids


def test_closing_joins_the_branch_into_one_file_that_restores_exactly(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in QUESTIONS:
        last(conv.turns.send(q))
    sid, held = conv.session.id, conv.views.state().cached_tokens
    assert len(set(files_named(conv))) == 3
    conv.close()
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    [joined] = set(files_named(again))
    assert Path(joined).name.startswith("cmp-") and on_disk() == {Path(joined).name}
    assert again.cache.last_load.ok and again.cache.last_load.reason is None
    assert again.views.state().cached_tokens == held
    nxt = last(again.turns.send("Four."))
    assert nxt.stats.reused_tokens == held and nxt.stats.cache_source == "snapshot"
    assert nxt.token_ids == warm_answer(tiny, tmp_path / "w.db", QUESTIONS, "Four.")
    # The next close joins the new turn's file to it; with nothing new, nothing is done.
    assert again.cache.compact().joined == 2
    mtime = os.stat(paths.kv_file(files_named(again)[0])).st_mtime_ns
    done = again.cache.compact()
    assert (done.joined, done.written, done.removed) == (0, 0, 0)
    assert os.stat(paths.kv_file(files_named(again)[0])).st_mtime_ns == mtime
    again.close()


def test_branches_and_forks_keep_sharing_after_a_join(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in QUESTIONS[:2]:
        last(conv.turns.send(q))
    first_leaf = conv.session.leaf_id
    last(conv.turns.retry())  # a second branch off the same history
    second_leaf = conv.session.leaf_id
    bytes_before = conv.store.segments.session_bytes(conv.session.id)
    conv.cache.compact()
    after = conv.store.segments.session_bytes(conv.session.id)
    assert after <= bytes_before  # the shared history is not copied per branch
    for leaf in (first_leaf, second_leaf):
        conv.saved.switch_branch(leaf)
        rows = conv.store.segments.on_branch(leaf)
        conv.cache.restore()
        assert conv.cache.last_load.ok and conv.cache.last_load.reason is None
        assert conv.views.state().cached_tokens == rows[-1].end
    assert all(paths.kv_file(r) for r in files_named(conv))
    conv.close()


def test_a_damaged_joined_file_falls_back_as_a_damaged_segment_does(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in QUESTIONS:
        last(conv.turns.send(q))
    sid = conv.session.id
    conv.close()
    store = open_store(tmp_path / "s.db")
    session = store.get_session(sid)
    [joined] = {r.path for r in store.segments.on_branch(session.leaf_id)}
    store.close()
    victim = paths.kv_file(joined)
    data = bytearray(victim.read_bytes())
    data[len(data) * 3 // 4] ^= 0xFF
    victim.write_bytes(bytes(data))
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    snap = again.cache.last_load
    assert not snap.ok and snap.reason == "segment 1 of 3: checksum mismatch (file changed or damaged)"
    assert "recomputes" in again.cache.words()
    nxt = last(again.turns.send("Four."))
    assert nxt.stats.reused_tokens == 0 and "checksum mismatch" in nxt.stats.miss_reason
    assert nxt.token_ids == warm_answer(tiny, tmp_path / "w.db", QUESTIONS, "Four.")
    again.close()


def test_a_fifo_in_place_of_a_segment_is_refused_without_blocking(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in QUESTIONS[:2]:
        last(conv.turns.send(q))
    sid, rows = conv.session.id, conv.store.segments.on_branch(conv.session.leaf_id)
    conv.close(compact=False)
    victim = paths.kv_file(rows[1].path)
    victim.unlink()
    os.mkfifo(victim)
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    snap = again.cache.last_load
    assert snap.ok and snap.tokens == rows[0].end
    assert snap.reason.startswith("segment 2 of 2: not a regular file")
    nxt = last(again.turns.send("Three!"))
    assert nxt.stats.reused_tokens == rows[0].end
    again.close()  # the join skips what it cannot read, and never waits on the pipe
    assert victim.exists() and not victim.is_file()


def test_a_fifo_in_place_of_a_shared_prefix_is_refused_without_blocking(tiny, tmp_path):
    doc = tmp_path / "harbour.txt"
    doc.write_text("\n".join(f"Line {i}: the harbour opens at {i % 12 + 1}." for i in range(40)))
    conv = make(tiny, tmp_path / "s.db")
    conv.pins.pin(doc, doc.read_text())
    for q in QUESTIONS[:2]:
        last(conv.turns.send(q))
    sid = conv.session.id
    conv.close()
    [prefix] = paths.kv_dir().glob("prefix-*.safetensors")
    prefix.unlink()
    os.mkfifo(prefix)
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    snap = again.cache.last_load
    assert not snap.ok and snap.reason.startswith("segment 1 of 3: not a regular file")
    nxt = last(again.turns.send("Three!"))
    assert nxt.stats.reused_tokens == 0 and "not a regular file" in nxt.stats.miss_reason
    again.close()
