"""Conversation: durable turn order and snapshot resume over a real store."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

from tests.renders import spy_on_render


def make(tiny, db: Path, session=None) -> Conversation:
    settings = Settings()
    settings.system_prompt = "Be brief."
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 8
    return Conversation(settings=settings, store=open_store(db), engine=ChatEngine(tiny),
                        model_spec="tiny", session=session)


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_damaged_snapshot_still_opens_the_session(tiny, tmp_path, damage):
    conv = make(tiny, tmp_path / "s.db")
    first = last(conv.turns.send("Hello there."))
    sid = conv.session.id
    [record] = conv.store.segments.on_branch(conv.session.leaf_id)
    assert record.start == 0 and record.end == first.stats.context_used
    conv.close()
    path = paths.kv_file(record.path)
    if damage == "missing":
        path.unlink()
    else:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))

    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    assert [m.role for m in again.messages] == ["user", "assistant"]
    assert again.cache.last_load is not None and not again.cache.last_load.ok
    nxt = last(again.turns.send("Still there?"))
    assert nxt.stats.cache_source == "cold" and nxt.stats.reused_tokens == 0
    assert nxt.stats.miss_reason.startswith("snapshot rejected: ")
    again.close()


def test_user_message_is_committed_before_the_reply(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    events = conv.turns.send("A question")
    reader = open_store(tmp_path / "s.db")
    stored = reader.get_session(conv.session.id).messages
    assert [(m.role, m.content) for m in stored] == [("user", "A question")]
    done = last(events)
    stored = reader.get_session(conv.session.id).messages
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].content == done.reply and stored[1].stats.generated_tokens == 8
    conv.close()


def test_resume_reuses_the_snapshot_in_a_new_conversation(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    one = last(conv.turns.send("First."))
    sid = conv.session.id
    conv.close()
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    assert again.views.state().cache_source == "snapshot"
    two = last(again.turns.send("Second."))
    assert two.stats.cache_source == "snapshot"
    assert two.stats.reused_tokens == one.stats.context_used
    again.close()


def test_a_snapshot_that_cannot_be_written_loses_nothing(tiny, tmp_path, mlxchat_home):
    # The snapshots folder cannot be created (a file is in the way), as on a
    # full or read-only disk: the reply is still committed and shown.
    (mlxchat_home / "data").mkdir(parents=True, exist_ok=True)
    (mlxchat_home / "data" / "snapshots").write_text("not a folder")
    conv = make(tiny, tmp_path / "s.db")
    done = last(conv.turns.send("Hello?"))
    assert done.stats.generated_tokens > 0
    stored = conv.store.get_session(conv.session.id).messages
    assert [m.content for m in stored] == ["Hello?", done.reply]
    assert conv.store.segments.on_branch(conv.session.leaf_id) == []
    follow = last(conv.turns.send("Again?"))  # the live cache is still warm
    assert follow.stats.cache_source == "warm" and follow.stats.miss_reason is None
    conv.close()


def test_a_send_renders_only_the_new_message(tiny, tmp_path, monkeypatch):
    conv = make(tiny, tmp_path / "s.db")
    last(conv.turns.send("First."))
    last(conv.turns.send("Second."))
    calls: list[list[str]] = []

    def counting(tokenizer, messages, **kw):
        calls.append([m.content for m in messages])
        return real(tokenizer, messages, **kw)
    real = spy_on_render(monkeypatch, counting)
    done = last(conv.turns.send("Third."))
    # The new message after two fixed stubs: the history is never re-rendered.
    assert len(calls) == 2 and all(c[-1] == "Third." for c in calls)
    assert not {"First.", "Second."} & {text for c in calls for text in c}
    assert done.stats.reused_tokens > 0 and done.stats.miss_reason is None
    conv.close()
