"""A killed process loses nothing it committed; a locked database gives a clear error."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mlxchat.store import StoreError, open_store

KILL_SELF = textwrap.dedent(
    """
    import os, signal, sys
    from mlxchat.store import open_store
    store = open_store(sys.argv[1])
    s = store.create_session("m")
    store.add_message(s.id, "user", "question committed before generation")
    store.add_message(s.id, "assistant", "partial ans", cancelled=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)

APPEND_FOREVER = textwrap.dedent(
    """
    import sys
    from mlxchat.store import open_store
    store = open_store(sys.argv[1])
    s = store.create_session("m")
    print(s.id, flush=True)
    i = 0
    while True:
        m = store.add_message(s.id, "user" if i % 2 == 0 else "assistant", f"message {i}")
        print(m.id, flush=True)
        i += 1
    """
)


def test_messages_committed_before_a_self_kill_survive(db_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SELF, str(db_path)], capture_output=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    store = open_store(db_path)
    session = store.most_recent_session()
    assert session is not None
    assert [(m.role, m.content, m.cancelled) for m in session.messages] == [
        ("user", "question committed before generation", False),
        ("assistant", "partial ans", True),
    ]
    store.add_message(session.id, "user", "and it carries on")  # type: ignore[arg-type]


def test_kill_mid_loop_keeps_every_committed_message(db_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", APPEND_FOREVER, str(db_path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    session_id = int(proc.stdout.readline())
    committed = [int(proc.stdout.readline()) for _ in range(40)]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # Ids printed after the 40 read above were committed too; collect them.
    committed += [int(line) for line in proc.stdout.read().split()]
    proc.stdout.close()

    assert sqlite3.connect(db_path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = open_store(db_path)
    session = store.get_session(session_id)
    stored = [m.id for m in store.all_messages(session_id)]
    assert stored[: len(committed)] == committed
    assert (
        len(stored) - len(committed) <= 1
    )  # at most the one committed as it was killed, before its print
    assert [m.id for m in session.messages] == stored  # one linear branch, leaf at the last commit
    assert store.list_sessions(search="message")[0].id == session_id
    store.add_message(session_id, "user", "reopened fine")


def test_a_write_lock_held_elsewhere_gives_a_clear_error(db_path: Path) -> None:
    store = open_store(db_path, timeout=0.2)
    s = store.create_session("m")
    store.add_message(s.id, "user", "before the lock")
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(StoreError) as err:
            store.add_message(s.id, "assistant", "blocked")
        assert time.monotonic() - started < 5
        message = str(err.value)
        assert "locked by another process" in message and "\n" not in message
        # WAL: reading, and opening an up-to-date database, still work meanwhile.
        assert [m.content for m in store.get_session(s.id).messages] == ["before the lock"]
        assert open_store(db_path, timeout=0.2).get_session(s.id).title == "before the lock"
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.add_message(s.id, "assistant", "after the lock").id is not None


def test_migrating_a_locked_database_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE placeholder (x)")  # version 0, non-empty: needs migrating
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            open_store(path, timeout=0.1)
    finally:
        other.execute("ROLLBACK")
        other.close()
