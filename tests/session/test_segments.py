"""KV segments: each turn writes only what it added; branches and forks share
their parents' files; damage in one segment recomputes from there on."""

from __future__ import annotations

from pathlib import Path

from mlxchat import paths
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

from tests.old_snapshots import record_old_snapshot, write_old_snapshot


def make(tiny, db: Path, *, keep_snapshots: bool = True) -> Conversation:
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 8
    return Conversation(settings=settings, store=open_store(db), engine=ChatEngine(tiny),
                        model_spec="tiny", keep_snapshots=keep_snapshots)


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


def files_of(conv: Conversation) -> list[Path]:
    rows = conv.store.segments.on_branch(conv.session.leaf_id)
    return [paths.kv_file(r.path) for r in rows]


def test_each_turn_writes_only_its_new_tokens(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in ("One.", "Two?", "Three!"):
        last(conv.turns.send(q))
    rows = conv.store.segments.on_branch(conv.session.leaf_id)
    assert [r.start for r in rows] == [0, rows[0].end, rows[1].end]
    assert rows[-1].end == conv.views.state().cached_tokens
    per_token = conv.views.state().kv_bytes / conv.views.state().cached_tokens
    for r in rows:  # the KV of its own tokens plus a small header, nothing more
        kv = (r.end - r.start) * per_token
        assert kv <= r.file_bytes <= kv + 8192
    conv.close()


def test_damage_in_one_segment_recomputes_from_that_segment_on(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    replies = [last(conv.turns.send(q)) for q in ("One.", "Two?", "Three!")]
    sid, rows = conv.session.id, conv.store.segments.on_branch(conv.session.leaf_id)
    conv.close(compact=False)  # as if killed: one file per turn
    second = paths.kv_file(rows[1].path)
    data = bytearray(second.read_bytes())
    data[len(data) // 2] ^= 0xFF
    second.write_bytes(bytes(data))
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    snap = again.cache.last_load
    assert snap.ok and snap.tokens == rows[0].end and "segment 2 of 3" in snap.reason
    assert "first" in again.cache.words()
    nxt = last(again.turns.send("Four."))
    assert nxt.stats.reused_tokens == rows[0].end and nxt.stats.cache_source == "snapshot"
    # The same as a warm turn would have answered.
    warm = make(tiny, tmp_path / "w.db")
    for q in ("One.", "Two?", "Three!"):
        last(warm.turns.send(q))
    assert last(warm.turns.send("Four.")).token_ids == nxt.token_ids
    assert replies[0].token_ids  # the first turn produced a ledger entry
    again.close()
    warm.close()


def test_branches_and_forks_share_their_parents_files(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in ("One.", "Two?"):
        last(conv.turns.send(q))
    trunk = files_of(conv)
    for n in range(3):  # three retries: three branches off the same history
        last(conv.turns.retry())
        assert files_of(conv)[:-1] == trunk[:-1]
    distinct = {p for p in (paths.kv_dir()).iterdir() if p.name.startswith("seg-")}
    assert len(distinct) == len(trunk) + 3  # one new file per branch, the trunk shared
    source = conv.session.id
    _, copy = conv.fork()
    assert files_of(conv) == files_of(conv) and conv.session.id == copy.id
    # No copies: opening the fork joined the source branch's files, fewer files.
    assert len({p for p in paths.kv_dir().iterdir()}) <= len(distinct)
    nxt = last(conv.turns.send("In the fork."))
    assert nxt.stats.reused_tokens > 0
    conv.delete_session(source)  # the fork still needs the shared files
    assert all(p.exists() for p in files_of(conv))
    conv.close()


def test_a_crafted_segment_path_is_never_read(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    last(conv.turns.send("One."))
    sid, leaf = conv.session.id, conv.session.leaf_id
    secret = tmp_path / "secret.safetensors"
    secret.write_bytes(paths.kv_file(
        conv.store.segments.on_branch(leaf)[0].path).read_bytes())
    with conv.store.db.writing() as cur:  # a crafted row
        cur.execute("UPDATE kv_segments SET path = ?", (str(secret),))
    conv.close()
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    assert not again.cache.last_load.ok and "file missing" in again.cache.last_load.reason
    again.delete_session(sid)
    assert secret.exists()
    again.close()


def test_a_whole_cache_snapshot_from_before_segments_still_resumes(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db", keep_snapshots=False)  # an old session, by hand
    one = last(conv.turns.send("One."))
    old = paths.kv_dir() / "session-old.safetensors"
    paths.ensure_private_dir(old.parent)
    info = write_old_snapshot(conv.engine, old)
    record_old_snapshot(conv.store, conv.session.id, conv.session.leaf_id, old,
                        sha256=info.checksum, token_count=info.tokens,
                        file_bytes=info.bytes, mlx_lm_version=info.mlx_lm_version)
    sid = conv.session.id
    conv.close()
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    assert again.cache.last_load.ok and again.cache.last_load.tokens == one.stats.context_used
    two = last(again.turns.send("Two?"))
    assert two.stats.reused_tokens == one.stats.context_used
    # Its first segment starts at 0 and the old file is gone.
    assert again.store.segments.on_branch(again.session.leaf_id)[0].start == 0
    assert not old.exists() and again.store.snapshots.latest(sid) is None
    again.close()


def test_a_quantized_cache_saves_and_resumes_and_a_width_change_stops_the_restore(tiny64,
                                                                                    tmp_path):
    conv = make(tiny64, tmp_path / "s.db")
    conv.update_generation(conv.generation.__class__(temperature=0.0, max_tokens=8, kv_bits=8))
    last(conv.turns.send("One."))
    two = last(conv.turns.send("Two?"))
    assert conv.views.state().kv_bits == 8
    sid = conv.session.id
    conv.close()
    again = make(tiny64, tmp_path / "s.db")
    again.open_session(sid)
    assert again.cache.last_load.ok and again.cache.last_load.tokens == two.stats.context_used
    assert again.views.state().kv_bits == 8 and again.cache.last_load.reason is None
    three = last(again.turns.send("Three!"))
    assert three.stats.reused_tokens == two.stats.context_used
    # Full precision from now on: the next segment has another layout.
    again.update_generation(again.generation.__class__(temperature=0.0, max_tokens=8))
    last(again.turns.send("Four."))
    again.close()
    final = make(tiny64, tmp_path / "s.db")
    final.open_session(sid)
    snap = final.cache.last_load
    assert snap.ok and "KV bit width changed" in snap.reason  # the 8-bit ones are kept
    final.close()


def test_a_segment_of_another_conversation_is_refused_by_its_tokens(tiny, tmp_path):
    a = make(tiny, tmp_path / "s.db")
    last(a.turns.send("Apples."))
    sid_a, leaf_a = a.session.id, a.session.leaf_id
    a.close()
    b = make(tiny, tmp_path / "s.db")
    last(b.turns.send("Pears are different."))
    [row_b] = b.store.segments.on_branch(b.session.leaf_id)
    b.close()
    store = open_store(tmp_path / "s.db")
    [row_a] = store.segments.on_branch(leaf_a)
    # Swap the file and its checksum: only the token ids can tell.
    paths.kv_file(row_a.path).write_bytes(paths.kv_file(row_b.path).read_bytes())
    with store.db.writing() as cur:
        cur.execute("UPDATE kv_segments SET checksum = ?, end_token = ? WHERE id = ?",
                    (row_b.checksum, row_b.end, row_a.id))
    store.close()
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid_a)
    assert not again.cache.last_load.ok
    assert "holds other tokens than the conversation" in again.cache.last_load.reason
    again.close()


def test_a_segment_cut_short_keeps_the_ones_before_it(tiny, tmp_path):
    """Checksums are checked after MLX has read the files (they overlap): a
    file cut short mid-data (a full disk, a crash while copying) must still
    only cost the segments from it on, and never crash the reader."""
    conv = make(tiny, tmp_path / "s.db")
    replies = [last(conv.turns.send(q)) for q in ("One.", "Two?", "Three!")]
    sid, rows = conv.session.id, conv.store.segments.on_branch(conv.session.leaf_id)
    conv.close(compact=False)  # as if killed: one file per turn
    for cut, kept in ((2, rows[1].end), (1, rows[0].end), (0, 0)):
        victim = paths.kv_file(rows[cut].path)
        data = victim.read_bytes()
        victim.write_bytes(data[:len(data) - 200])
        again = make(tiny, tmp_path / "s.db")
        again.open_session(sid)
        snap = again.cache.last_load
        assert f"segment {cut + 1} of 3" in snap.reason
        assert snap.ok == (kept > 0) and again.views.state().cached_tokens == kept
        nxt = last(again.turns.send("Four."))
        assert nxt.stats.reused_tokens == kept
        again.turns.undo()  # the next round finds the same branch of three
        again.close(compact=False)
    assert replies[-1].token_ids


def test_a_damaged_header_is_refused_by_its_checksum_not_a_crash(tiny, tmp_path):
    """A header whose types were altered no longer matches the segment before
    it: the segment is refused before anything is read, the ones before kept
    (a change the header checks cannot see is refused by the checksum)."""
    conv = make(tiny, tmp_path / "s.db")
    for q in ("One.", "Two?", "Three!"):
        last(conv.turns.send(q))
    sid, rows = conv.session.id, conv.store.segments.on_branch(conv.session.leaf_id)
    conv.close(compact=False)  # as if killed: one file per turn
    victim = paths.kv_file(rows[1].path)
    data = victim.read_bytes()
    for was, now in ((b'"F32"', b'"U32"'), (b'"F16"', b'"I16"'), (b'"BF16"', b'"I16"')):
        if was in data[:4096]:  # same size: MLX reads it, as the wrong type
            victim.write_bytes(data.replace(was, now, 1))
            break
    else:
        raise AssertionError("no float array in the segment's header")
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    snap = again.cache.last_load
    assert snap.ok and snap.tokens == rows[0].end
    assert "segment 2 of 3: its arrays do not match the segment before" in snap.reason
    assert last(again.turns.send("Four.")).stats.reused_tokens == rows[0].end
    again.close()


def test_segments_checksummed_by_an_older_version_still_resume(tiny, tmp_path):
    """New segments carry an XXH3 hash; those written before carry a CRC-32.
    Each is checked by its own algorithm: an old intact file restores, an old
    damaged one is refused."""
    import sqlite3
    import zlib

    conv = make(tiny, tmp_path / "s.db")
    for q in ("One.", "Two?"):
        last(conv.turns.send(q))
    sid, rows = conv.session.id, conv.store.segments.on_branch(conv.session.leaf_id)
    assert all(r.checksum.startswith("xxh3:") and len(r.checksum) == 21 for r in rows)
    conv.close(compact=False)  # as if killed: one file per turn
    db = sqlite3.connect(tmp_path / "s.db")
    for r in rows:  # as an older mlxchat recorded them
        crc = f"{zlib.crc32(paths.kv_file(r.path).read_bytes()):08x}"
        db.execute("UPDATE kv_segments SET checksum = ? WHERE path = ?", (crc, r.path))
    db.commit()
    db.close()
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    assert again.cache.last_load.ok and again.cache.last_load.reason is None
    assert again.views.state().cached_tokens == rows[-1].end
    again.close(compact=False)
    victim = paths.kv_file(rows[1].path)
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0x01
    victim.write_bytes(bytes(data))
    third = make(tiny, tmp_path / "s.db")
    third.open_session(sid)
    assert third.cache.last_load.tokens == rows[0].end
    assert "segment 2 of 2: checksum mismatch" in third.cache.last_load.reason
    third.close()
