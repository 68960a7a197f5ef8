"""A process killed (SIGKILL) while it prepares a compaction leaves the
conversation as it was: every message, no summary, its KV files restoring
exactly, the next reply the one a cold engine gives for the same ledger."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model

from tests.session.compacting import last, make, question

CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, sys.argv[4])
    from mlxchat.engine.turn import prepared
    from mlxchat.models import load_folder
    from tests.session.compacting import last, make, question

    folder, db, sid, step = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[5]
    real = getattr(prepared.PreparedCache, step)

    def killed(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # after one job of the preparation
        return out
    setattr(prepared.PreparedCache, step, killed)
    conv = make(load_folder(folder, name="tiny", spec="tiny"), db)
    conv.open_session(sid)
    last(conv.turns.send(question(99)))  # past the threshold: the preparation starts
    conv.compactor._thread.join(60)
    sys.exit(3)  # never killed: the preparation never ran
""")


@pytest.mark.parametrize("step", ["write", "extend"])
def test_a_kill_while_preparing_leaves_the_conversation_as_it_was(step, tmp_path, mlxchat_home):
    folder, db = write_tiny_model(tmp_path / "tiny"), tmp_path / "s.db"
    model = load_folder(folder, name="tiny", spec="tiny")
    conv = make(model, db, ahead=False)
    i = 0
    while not conv.compactor.due():
        last(conv.turns.send(question(i)))
        i += 1
    conv.turns.undo()  # one turn back: the child's turn crosses the threshold again
    sid = conv.session.id
    conv.close(compact=False)
    root = str(Path(__file__).resolve().parents[2])
    # 'write': killed while the summary is written; 'extend': once it is, while the
    # compacted conversation is prefilled.
    proc = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(db), str(sid), root,
                           step], capture_output=True, timeout=180)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]

    again = make(model, db, ahead=False)
    again.open_session(sid)
    branch = again.messages
    assert branch[-2].content == question(99) and branch[-1].role == "assistant"
    assert not any(m.role == "summary" for m in again.store.all_messages(sid))
    assert again.cache.last_load.ok and again.cache.last_load.reason is None
    follow = "And after the kill?"
    prompt = again.ledger(again.engine).plan_message(branch, follow).prompt
    resumed = last(again.turns.send(follow))
    assert resumed.stats.cache_source == "snapshot" and resumed.stats.miss_reason is None
    engine = ChatEngine(model)
    cold = [e for e in engine.turn(FittedPrompt(prompt.tokens, prompt.messages, 0, ledger=True),
                                   GenerationSettings(temperature=0.0, max_tokens=8))
            if isinstance(e, TurnDone)][-1]
    assert cold.token_ids == resumed.token_ids
    engine.close()
    again.close(compact=False)
