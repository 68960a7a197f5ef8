"""Other processes on the same data: a database write lock held during and after
a reply loses nothing and never stalls the stream; one session has one writer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session import conversation as conversation_module
from mlxchat.session import pending as pending_reply
from mlxchat.session import turns as turns_module
from mlxchat.session.conversation import Conversation
from mlxchat.session.errors import ConversationError
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()  # hold the write lock until told to let go
db.execute("COMMIT")
"""


def hold_write_lock(db) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def let_go(proc: subprocess.Popen) -> None:
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait(timeout=30)


def make(tiny, db, max_tokens=40) -> Conversation:
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = max_tokens
    return Conversation(settings=settings, store=open_store(db), engine=ChatEngine(tiny),
                        model_spec="tiny")


def test_a_locked_database_never_stalls_the_stream_and_loses_no_reply(tiny, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setattr(turns_module, "DRAFT_INTERVAL_S", 0.0)  # checkpoint each piece
    conv = make(tiny, tmp_path / "s.db")
    sid = conv.session.id
    stalls = []
    real = conv.store.drafts.save  # a checkpoint: what waits for the lock, if anything

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            stalls.append(time.perf_counter() - t0)
    monkeypatch.setattr(conv.store.drafts, "save", timed)
    events = conv.turns.send("Hello there.")  # the question is stored before the lock is taken
    holder = hold_write_lock(tmp_path / "s.db")
    try:
        done = [e for e in events if isinstance(e, TurnDone)][0]
        # Every checkpoint gave up at once instead of waiting out the busy timeout.
        assert len(stalls) > 5 and max(stalls) < 1.0
        assert done.stats.save_warning and "locked" in done.stats.save_warning
        with open_store(tmp_path / "s.db") as reader:
            assert [m.role for m in reader.get_session(sid).messages] == ["user"]
        with pytest.raises(ConversationError, match="not saved yet"):
            conv.turns.send("And then?")  # nothing may follow a reply the database lacks
    finally:
        let_go(holder)
    follow = [e for e in conv.turns.send("And then?") if isinstance(e, TurnDone)][0]
    stored = conv.store.get_session(sid).messages
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1].content == done.reply and stored[3].content == follow.reply
    assert stored[1].token_ids == done.token_ids  # its ledger entry too
    # What was shown live ("not saved yet") is kept as what happened.
    assert stored[1].stats.save_warning.startswith("stored late: the session database was "
                                                   "locked")
    assert stored[3].stats.save_warning is None
    conv.shutdown()


def test_a_reply_still_locked_at_quit_is_stored_by_the_next_open(tiny, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setattr(conversation_module, "QUIT_SAVE_WAIT_S", 0.3)
    conv = make(tiny, tmp_path / "s.db", max_tokens=6)
    events = conv.turns.send("Hello there.")
    holder = hold_write_lock(tmp_path / "s.db")
    try:
        done = [e for e in events if isinstance(e, TurnDone)][0]
        sid = conv.session.id
        conv.shutdown()
        assert pending_reply.unsaved_file(sid).is_file()
    finally:
        let_go(holder)
    again = make(tiny, tmp_path / "s.db")
    again.open_session(sid)
    assert [m.content for m in again.messages] == ["Hello there.", done.reply]
    assert not pending_reply.unsaved_file(sid).exists()
    again.shutdown()


def one_session(tiny, tmp_path) -> tuple[Settings, dict, Conversation]:
    """The settings and opener of a store in ``tmp_path``, and a conversation
    open on it with one turn."""
    settings = Settings(model="tiny")
    opener = dict(store_factory=lambda: open_store(tmp_path / "s.db"),
                  load_model=lambda spec, progress=None: tiny)
    first = open_conversation(settings, **opener).conversation
    [e for e in first.turns.send("Hello.") if isinstance(e, TurnDone)]
    return settings, opener, first


def test_a_session_open_in_one_place_is_refused_in_another(tiny, tmp_path):
    settings, opener, first = one_session(tiny, tmp_path)
    sid = first.session.id
    # The UI's lenient lookup: says so and starts a new session.
    ui = open_conversation(settings, session=str(sid), **opener)
    assert ui.conversation.session.id != sid
    # (Two conversations of one process: the refusal says so.)
    assert any("in use by another part of this mlxchat" in text for text, _ in ui.notices)
    ui.conversation.shutdown()
    # A script's exact lookup: refused in one line, nothing changed.
    with pytest.raises(Exception, match=rf"Session #{sid} .* is in use by another part of this mlxchat"):
        open_conversation(settings, session=str(sid), lookup="exact", **opener)
    first.shutdown()
    again = open_conversation(settings, session=str(sid), lookup="exact", **opener)
    assert again.conversation.session.id == sid  # free once the first one closed
    again.conversation.shutdown()


HOLD_SESSION = """
import sys
from mlxchat.session.lock import SessionLock
lock = SessionLock(sys.argv[1], int(sys.argv[2]))
print("held", flush=True)
sys.stdin.readline()  # hold the session's lock until told to let go
lock.release()
"""


def test_a_session_open_in_another_process_names_its_pid(tiny, tmp_path):
    settings, opener, first = one_session(tiny, tmp_path)
    sid = first.session.id
    first.shutdown()
    other = subprocess.Popen([sys.executable, "-c", HOLD_SESSION, str(tmp_path / "s.db"),
                              str(sid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert other.stdout.readline().strip() == "held"
        with pytest.raises(Exception) as refused:
            open_conversation(settings, session=str(sid), lookup="exact", **opener)
        words = str(refused.value)
        assert f"Session #{sid}" in words and f"is open in another mlxchat (pid {other.pid})" \
            in words and "\n" not in words
    finally:
        let_go(other)
    again = open_conversation(settings, session=str(sid), lookup="exact", **opener)
    assert again.conversation.session.id == sid  # free once the other process let go
    again.conversation.shutdown()


def test_two_asks_on_one_session_take_turns(tiny_model_dir, tmp_path):
    env = {**os.environ, "MLXCHAT_HOME": str(tmp_path / "home")}

    def ask(question: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "mlxchat", "ask", "--session", "A", "--model",
             str(tiny_model_dir), "--max-tokens", "48", "--temp", "0", "--json", question],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = ask("First question?")
    time.sleep(0.5)
    second = ask("Second question?")
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert all(p.returncode == 0 for p in (first, second)), [o[1] for o in outs]
    replies = {json.loads(o[0])["reply"] for o in outs}
    os.environ["MLXCHAT_HOME"], saved = str(tmp_path / "home"), os.environ.get("MLXCHAT_HOME")
    try:
        with open_store() as store:
            session = store.find_session("A")
            messages = session.messages
    finally:
        os.environ["MLXCHAT_HOME"] = saved or ""
    # One after the other: each reply follows its own question, nothing interleaved.
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    for question, answer in ((messages[0], messages[1]), (messages[2], messages[3])):
        assert answer.parent_id == question.id
    assert {messages[1].content, messages[3].content} == replies
