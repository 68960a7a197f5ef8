"""A real `mlxchat ask --session` killed with SIGKILL mid-reply loses nothing
the user already saw: the question, and the reply up to its last checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from mlxchat.session.turns import DRAFT_INTERVAL_S
from mlxchat.store import open_store

from tests.long_replies import never_ending


def _stream_until(proc: subprocess.Popen, shown: bytearray, done, timeout: float) -> None:
    """Read the child's stdout into `shown` until done() says so; the child must live on."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"no progress after {timeout} s: {bytes(shown)!r}"
        assert proc.poll() is None, proc.stderr.read().decode()
        shown += proc.stdout.read() or b""
        time.sleep(0.02)


def test_sigkill_mid_reply_keeps_what_was_shown(tmp_path, mlxchat_home):
    model = never_ending(tmp_path / "tiny")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlxchat", "ask", "--session", "killed", "--model", str(model),
         "--max-tokens", "16000", "--temp", "0.8", "--seed", "3", "Tell me everything."],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        shown = bytearray()
        # Start-up (imports, loading, prefill) may be slow on a busy machine: the clock
        # starts at the reply's first byte on stdout, not at spawn.
        _stream_until(proc, shown, lambda: len(shown) > 0, timeout=120)
        first_byte = time.monotonic()
        # Checkpoints come every DRAFT_INTERVAL_S, timed from the turn's start (before
        # the first byte). Two intervals after the first byte, at least one checkpoint
        # holds a full interval of streamed text; the margin covers a slow token.
        wait = 2 * DRAFT_INTERVAL_S + 0.5
        _stream_until(proc, shown, timeout=120,
                      done=lambda: time.monotonic() - first_byte > wait and len(shown) > 200)
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-reply, or on a failure above
    proc.wait(timeout=30)
    shown += proc.stdout.read() or b""
    shown = bytes(shown)
    assert proc.returncode == -signal.SIGKILL

    store = open_store()
    session = store.find_session("killed")
    assert [m.role for m in session.messages] == ["user"]  # the reply never finished
    assert session.messages[0].content == "Tell me everything."
    recovered = store.drafts.recover(session.id)
    assert recovered is not None and recovered.cancelled
    # What was checkpointed is exactly what the user saw, up to the last checkpoint.
    assert len(recovered.content) > 100
    assert shown.decode("utf-8", "replace").startswith(recovered.content)
    reopened = store.get_session(session.id)
    assert [m.role for m in reopened.messages] == ["user", "assistant"]
