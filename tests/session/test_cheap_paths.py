"""The cheap paths of the KV cache: a fork of the open branch keeps the live
cache instead of reading the files it shares (only the new message is
prefilled), and a branch's files on disk are counted once, the part shared
with other branches said apart."""

from __future__ import annotations

from mlxchat import paths

from tests.session.test_compaction import last, make

QUESTIONS = ("One.", "Two?", "Three! Tell me about rivers and the sea.")


def test_a_fork_keeps_the_live_cache_and_prefills_only_the_new_message(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in QUESTIONS:
        last(conv.turns.send(q))
    held = conv.engine.cached_tokens
    source, copy = conv.fork()
    assert conv.session.id == copy.id != source.id
    load = conv.cache.last_load
    assert load is not None and load.from_live and load.tokens == len(held)
    assert "no file read" in conv.cache.words()
    assert conv.engine.cached_tokens == held  # nothing was replaced
    nxt = last(conv.turns.send("Four, on the fork."))
    assert nxt.stats.cache_source == "warm"
    assert nxt.stats.reused_tokens == len(held)
    assert nxt.stats.prefilled_tokens == nxt.stats.prompt_tokens - len(held)
    # The same reply as the source branch would have given.
    conv.open_session(source.id)
    assert last(conv.turns.send("Four, on the fork.")).token_ids == nxt.token_ids
    conv.close()


def test_a_fork_of_another_conversation_still_reads_its_files(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in QUESTIONS[:2]:
        last(conv.turns.send(q))
    first = conv.session.id
    conv.new_session()
    last(conv.turns.send("Something else entirely."))
    conv.open_session(first)  # the live cache holds the other session
    load = conv.cache.last_load
    assert load is not None and load.ok and not load.from_live
    assert last(conv.turns.send("Three.")).stats.cache_source == "snapshot"
    conv.close()


def test_files_shared_by_branches_are_counted_once_and_said_apart(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in ("One.", "Two?", "Three!"):
        last(conv.turns.send(q))
    a_leaf = conv.session.leaf_id
    last(conv.turns.edit_last("Three?"))
    last(conv.turns.send("Four."))
    conv.cache.compact()  # branch B's four turns in one file, A's first two inside it
    conv.saved.switch_branch(a_leaf)
    sizes = {p.name: p.stat().st_size for p in paths.kv_dir().iterdir()}
    a_files = {paths.kv_file(r.path).name for r in conv.store.segments.on_branch(a_leaf)}
    [joined] = [n for n in sizes if n.startswith("cmp-")]
    assert joined in a_files and len(a_files) == 2
    disk = conv.cache.on_disk()
    assert disk.segments == 2
    assert disk.file_bytes == sum(sizes[n] for n in a_files)
    assert disk.shared_bytes == sizes[joined]  # B reads it too
    assert disk.session_bytes == sum(sizes.values())  # the joined file once
    conv.close(compact=False)
