"""Pinned documents: one shared KV prefix per system part, computed once,
loaded by every other session that pins the same documents, removed when no
session uses it any more."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.chat import Message
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

from tests.engine.conftest import run

DOC = "\n".join(f"Line {i}: the harbour opens at {i % 12 + 1} o'clock." for i in range(40))


def make(loaded, db: Path, *, engine: ChatEngine | None = None) -> Conversation:
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 8
    return Conversation(settings=settings, store=open_store(db),
                        engine=engine or ChatEngine(loaded), model_spec="tiny")


def ask(conv: Conversation, text: str) -> TurnDone:
    return [e for e in conv.turns.send(text) if isinstance(e, TurnDone)][-1]


def prefix_files() -> list[Path]:
    return sorted(paths.kv_dir().glob("prefix-*.safetensors"))


def pinned(loaded, db: Path, doc_path: Path, **kw) -> Conversation:
    conv = make(loaded, db, **kw)
    conv.pins.pin(doc_path, doc_path.read_text())
    return conv


@pytest.fixture
def doc(tmp_path) -> Path:
    path = tmp_path / "harbour.txt"
    path.write_text(DOC)
    return path


def test_two_sessions_share_one_prefix_and_the_second_loads_it(tiny, tmp_path, doc):
    first = pinned(tiny, tmp_path / "s.db", doc)
    n = len(first.pins.prefix_tokens())
    assert n > first.session.pins[0].tokens > 100
    a = ask(first, "When does it open?")
    assert first.pins.last_prefix.how == "computed" and a.stats.reused_tokens == 0
    assert len(prefix_files()) == 1
    first.close()

    second = pinned(tiny, tmp_path / "s.db", doc)  # another session, a fresh engine
    assert second.session.id != first.session.id
    b = ask(second, "When does it open?")
    assert second.pins.last_prefix.how == "loaded"
    assert b.stats.reused_tokens == n and b.stats.prefilled_tokens == b.stats.prompt_tokens - n
    assert b.token_ids == a.token_ids  # loaded gives what computing gave
    assert len(prefix_files()) == 1
    views = second.pins.list()
    assert [v.name for v in views] == ["harbour.txt"] and views[0].stored
    assert {u.session_id for u in views[0].sessions} == {first.session.id, second.session.id}
    assert second.views.state().pinned_tokens == n
    second.close()


def test_the_shared_prefix_matches_a_whole_render(tiny, tmp_path, doc):
    conv = pinned(tiny, tmp_path / "s.db", doc)
    whole = conv.engine.prompts.render_tokens(conv.engine_messages([Message("user", "Hi")]))
    ids = conv.pins.prefix_tokens()
    assert whole[:len(ids)] == ids and conv.session.context_system.endswith("</document>")
    conv.close()


def test_unpin_trims_back_and_answers_as_if_never_pinned(tiny, tmp_path, doc):
    conv = pinned(tiny, tmp_path / "s.db", doc)
    ask(conv, "When does it open?")
    before = [(m.role, m.content) for m in conv.messages]
    assert [p.name for p in conv.pins.unpin("harbour.txt")] == ["harbour.txt"]
    assert [(m.role, m.content) for m in conv.messages] == before  # nothing lost or altered
    assert prefix_files() == []  # no session uses it any more
    done = ask(conv, "And on Sunday?")
    assert done.stats.miss_reason == "pinned documents changed"
    assert conv.views.state().pinned_tokens == 0
    fresh = ChatEngine(tiny)
    never = run(fresh, conv.engine_messages()[:-1], conv.generation)
    fresh.close()
    assert done.reply == never.reply
    conv.close()


def test_deleting_the_last_session_that_pins_it_removes_the_file(tiny, tmp_path, doc):
    a = pinned(tiny, tmp_path / "s.db", doc)
    ask(a, "Hello?")
    b = pinned(tiny, tmp_path / "s.db", doc, engine=a.engine)
    ask(b, "Hello?")
    assert b.pins.last_prefix.how in ("live", "loaded") and len(prefix_files()) == 1
    b.delete_session(a.session.id)
    assert len(prefix_files()) == 1  # b still pins it
    b.delete_session()
    assert prefix_files() == []
    a.close()


def test_a_corrupt_prefix_file_is_recomputed_and_said_so(tiny, tmp_path, doc):
    first = pinned(tiny, tmp_path / "s.db", doc)
    a = ask(first, "When does it open?")
    first.close()
    [file] = prefix_files()
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))
    second = pinned(tiny, tmp_path / "s.db", doc)
    b = ask(second, "When does it open?")
    assert second.pins.last_prefix.how == "computed" and "recomputed" in second.pins.last_prefix.reason
    assert "rejected" in b.stats.miss_reason and "checksum" in b.stats.miss_reason
    assert b.stats.reused_tokens == 0 and b.token_ids == a.token_ids
    third = pinned(tiny, tmp_path / "s.db", doc)  # the recomputed file replaced it
    ask(third, "When does it open?")
    assert third.pins.last_prefix.how == "loaded"
    second.close()
    third.close()


def test_bad_pins_change_nothing(tiny_small_window, tmp_path, doc):
    from mlxchat.session.pins import PinError

    conv = make(tiny_small_window, tmp_path / "s.db")
    with pytest.raises(PinError, match="tokens; only"):
        conv.pins.pin(doc, DOC)  # 256-token window
    small = tmp_path / "note.txt"
    small.write_text("Short note.")
    conv.pins.pin(small, "Short note.")
    with pytest.raises(PinError, match="pinned already"):
        conv.pins.pin(small, "Short note.")
    with pytest.raises(PinError, match="No pinned document"):
        conv.pins.unpin("other.txt")
    assert [p.name for p in conv.session.pins] == ["note.txt"]
    conv.close()


def test_a_session_with_only_a_pin_is_kept_at_quit(tiny, tmp_path, doc):
    conv = pinned(tiny, tmp_path / "s.db", doc)
    assert not conv.saved.discard_if_empty()
    assert conv.store.get_session(conv.session.id).pins
    conv.close()


def test_a_pinned_session_saves_only_what_follows_the_prefix_and_resumes(tiny, tmp_path, doc):
    conv = pinned(tiny, tmp_path / "s.db", doc)
    n = len(conv.pins.prefix_tokens())
    ask(conv, "When does it open?")
    second = ask(conv, "And on Sunday?")
    rows = conv.store.segments.on_branch(conv.session.leaf_id)
    assert rows[0].start == n and {r.prefix_key for r in rows} == {conv.session.pins[0].prefix_key}
    assert conv.cache.on_disk().tokens == conv.views.state().cached_tokens
    sid = conv.session.id
    conv.close()
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    assert again.cache.last_load.ok and again.cache.last_load.tokens == rows[-1].end
    nxt = ask(again, "And on Monday?")
    assert nxt.stats.cache_source == "snapshot" and nxt.stats.reused_tokens == rows[-1].end
    fresh = ChatEngine(tiny)
    cold = run(fresh, again.engine_messages()[:-1], again.generation)
    fresh.close()
    assert nxt.reply == cold.reply and second.stats.miss_reason is None
    again.close()


def test_a_missing_prefix_file_makes_its_sessions_recompute(tiny, tmp_path, doc):
    conv = pinned(tiny, tmp_path / "s.db", doc)
    ask(conv, "When does it open?")
    sid = conv.session.id
    conv.close()
    [file] = prefix_files()
    file.unlink()
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    assert not again.cache.last_load.ok
    nxt = ask(again, "And on Monday?")
    assert nxt.stats.reused_tokens == 0 and again.pins.last_prefix.how == "computed"
    assert len(prefix_files()) == 1  # computed again, and kept again
    again.close()
