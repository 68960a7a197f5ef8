"""Joining a branch's KV segment files, killed with SIGKILL at any step, loses
nothing: the session reopens and restores exactly, and the next join cleans
up what the kill left. A FIFO in place of a segment file never keeps a real
`mlxchat ask` from answering and exiting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mlxchat import paths
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

CHILD = textwrap.dedent("""
    import os, signal, sys
    from mlxchat.config import Settings
    from mlxchat.engine.core import ChatEngine
    from mlxchat.models.loader import load_folder
    from mlxchat.session import compaction
    from mlxchat.session.conversation import Conversation
    from mlxchat.store import open_store
    from mlxchat.store.segments import Segments

    model, db, sid, step = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    die = lambda *_: os.kill(os.getpid(), signal.SIGKILL)

    def after(real):
        def wrapped(*args, **kwargs):
            out = real(*args, **kwargs)
            die()
            return out
        return wrapped

    if step == "write":  # the temp file is written, not yet synced
        os.fsync = die
    elif step == "rename":  # the joined file has its name, no row names it
        os.link = after(os.link)
    elif step == "rows":  # the rows name the joined file, the old files remain
        Segments.replace_files = after(Segments.replace_files)
    elif step == "delete":  # one old file deleted, the others remain
        compaction.remove_files = lambda files: die(os.unlink(files[0])) if files else []
    conv = Conversation(settings=Settings(), store=open_store(db),
                        engine=ChatEngine(load_folder(model, name="tiny")), model_spec="tiny",
                        session=open_store(db).get_session(sid))
    conv.close()
    sys.exit(3)  # not killed: the step was never reached
""")

STEPS = ("write", "rename", "rows", "delete")


def _send(conv: Conversation, text: str) -> TurnDone:
    return [e for e in conv.turns.send(text) if isinstance(e, TurnDone)][-1]


def _make(model, db) -> Conversation:
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 8
    return Conversation(settings=settings, store=open_store(db),
                        engine=ChatEngine(load_folder(model, name="tiny")), model_spec="tiny")


@pytest.mark.parametrize("step", STEPS)
def test_a_join_killed_at_any_step_loses_nothing(step, tmp_path, mlxchat_home):
    model, db = write_tiny_model(tmp_path / "tiny"), tmp_path / "s.db"
    conv = _make(model, db)
    for q in ("One.", "Two?", "Three!"):
        _send(conv, q)
    sid, held = conv.session.id, conv.views.state().cached_tokens
    conv.close(compact=False)  # as after a crash: one file per turn
    child = subprocess.run([sys.executable, "-c", CHILD, str(model), str(db), str(sid), step],
                           capture_output=True, timeout=120, env=os.environ.copy())
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]

    again = _make(model, db)
    again.open_session(sid)
    rows = again.store.segments.on_branch(again.session.leaf_id)
    assert all(paths.kv_file(r.path).is_file() for r in rows)
    assert again.cache.last_load.ok and again.cache.last_load.reason is None
    assert again.views.state().cached_tokens == held
    nxt = _send(again, "Four.")
    assert nxt.stats.reused_tokens == held
    again.close()  # joins again, and deletes what the kill left
    store = open_store(db)
    named = {os.path.basename(r.path)
             for r in store.segments.on_branch(store.get_session(sid).leaf_id)}
    store.close()
    assert len(named) == 1 and set(os.listdir(paths.kv_dir())) == named


def test_a_fifo_in_place_of_a_segment_answers_cold_and_exits(tmp_path, mlxchat_home):
    model = write_tiny_model(tmp_path / "tiny")

    def ask(text: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-m", "mlxchat", "ask", "--session", "piped", "--model",
             str(model), "--max-tokens", "4", "--temp", "0", "--json", text],
            capture_output=True, text=True, timeout=60, env=os.environ.copy())
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout)

    ask("Hello there.")
    [segment] = [p for p in paths.kv_dir().iterdir() if p.name.startswith("seg-")]
    segment.unlink()
    os.mkfifo(segment)
    out = ask("And then?")  # bounded by the timeout above: it must not wait on the pipe
    assert out["snapshot"]["ok"] is False
    assert "not a regular file" in out["snapshot"]["reason"]
    assert "not a regular file" in out["miss_reason"] and out["reused_tokens"] == 0
