"""A real `mlxchat serve` stopped the ways a service manager stops it: SIGTERM
mid-stream (launchctl, systemd, Docker, kill) ends the client's stream with
an error event and stores the partial reply, as ctrl-c does; SIGKILL loses
no more than the last checkpoint, and the next start stores what was
checkpointed, marked cut."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from mlxchat.session.turns import DRAFT_INTERVAL_S
from mlxchat.store import open_store

from tests.long_replies import never_ending
from tests.server.served_process import ServeProcess, Stream, end_all


@pytest.fixture(scope="module")
def long_model(tmp_path_factory) -> Path:
    return never_ending(tmp_path_factory.mktemp("long-tiny"))


@pytest.fixture
def key_file(tmp_path) -> Path:
    key = tmp_path / "api-key"
    key.write_text("k-" + os.urandom(8).hex() + "\n")
    key.chmod(0o600)
    return key


def _errors(stream: Stream) -> list[dict]:
    return [json.loads(e)["error"] for e in stream.events
            if e.startswith("{") and "error" in json.loads(e)]


def test_sigkill_then_sigterm_keep_what_was_streamed(long_model, key_file, tmp_path):
    key = key_file.read_text().strip()
    auth = {"Authorization": f"Bearer {key}"}
    started: list[ServeProcess] = []
    try:
        # SIGKILL mid-stream: nothing runs on the way out.
        first = ServeProcess(long_model, "--api-key-file", str(key_file))
        started.append(first)
        cmdline = Path(f"/proc/{first.proc.pid}/cmdline").read_bytes()
        assert key.encode() not in cmdline  # the key never reaches the command line
        killed = Stream(first.port, long_model.name, "Tell me everything.",
                        max_tokens=15000, headers=auth)
        killed.read(lambda s: len(s.text) > 0)
        shown_at = time.monotonic()
        # Checkpoints come every DRAFT_INTERVAL_S: two after the first text, one
        # holds a full interval of it.
        killed.read(lambda s: time.monotonic() - shown_at > 2 * DRAFT_INTERVAL_S + 0.5
                    and len(s.text) > 100)
        assert first.end(signal.SIGKILL) == -signal.SIGKILL
        killed.close()

        # The next start stores the checkpointed reply, marked cut.
        second = ServeProcess(long_model, "--api-key-file", str(key_file))
        started.append(second)
        second.wait_ready()
        store = open_store()
        [session] = [s for s in store.list_sessions() if s.message_count]
        messages = store.get_session(session.id).messages
        assert [m.role for m in messages] == ["user", "assistant"]
        cut = messages[1]
        assert cut.cancelled and len(cut.content) > 50
        assert killed.text.startswith(cut.content)
        store.close()

        # SIGTERM mid-stream: the client hears why its stream ends; the reply is kept.
        termed = Stream(second.port, long_model.name, "Now tell me the rest.",
                        max_tokens=15000, headers=auth)
        termed.read(lambda s: len(s.text) > 100)
        second.proc.send_signal(signal.SIGTERM)
        termed.read(lambda s: False)  # to the end of the stream
        assert [e["code"] for e in _errors(termed)] == ["server_stopped"]
        assert termed.events[-1] == "[DONE]"
        assert second.end(signal.SIGTERM) == 0
        assert "Traceback" not in "".join(second.log)
        store = open_store()
        sessions = store.list_sessions()
        stored = [m for s in sessions for m in store.get_session(s.id).messages
                  if m.role == "assistant" and m.cancelled]
        assert len(stored) == 2
        latest = max(stored, key=lambda m: m.id)
        assert latest.content == termed.text
        assert latest.stats is not None and latest.stats.finish_reason == "cancelled"
        store.close()
    finally:
        end_all(started)
