"""A real `mlxchat ask --session` killed with SIGKILL mid-reply loses nothing
the user already saw: the question, and the reply up to its last checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from mlxchat.models.tiny import write_tiny_model
from mlxchat.store import open_store


def test_sigkill_mid_reply_keeps_what_was_shown(tmp_path, mlxchat_home):
    model = write_tiny_model(tmp_path / "tiny", context_window=16384)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlxchat", "ask", "--session", "killed", "--model", str(model),
         "--max-tokens", "16000", "--temp", "0.8", "--seed", "3", "Tell me everything."],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
    shown = b""
    start = time.monotonic()
    os.set_blocking(proc.stdout.fileno(), False)
    # Let it stream for a while: checkpoints are written every second.
    while time.monotonic() - start < 60:
        chunk = proc.stdout.read() or b""
        shown += chunk
        if len(shown) > 200 and time.monotonic() - start > 3.5:
            break
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    shown += proc.stdout.read() or b""
    assert proc.returncode == -signal.SIGKILL

    store = open_store()
    session = store.find_session("killed")
    assert [m.role for m in session.messages] == ["user"]  # the reply never finished
    assert session.messages[0].content == "Tell me everything."
    recovered = store.recover_draft(session.id)
    assert recovered is not None and recovered.cancelled
    # What was checkpointed is exactly what the user saw, up to the last second.
    assert len(recovered.content) > 100
    assert shown.decode("utf-8", "replace").startswith(recovered.content)
    reopened = store.get_session(session.id)
    assert [m.role for m in reopened.messages] == ["user", "assistant"]
