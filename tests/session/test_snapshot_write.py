"""A snapshot that cannot be written is a warning in the turn's stats, never an
error for the turn: the reply is stored complete (issue 9, item 5)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from types import SimpleNamespace

import pytest

from mlxchat import cli, paths
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.disk import segments as segments_module
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store
from mlxchat.tui.formatting import transcript_stats_line


def make(tiny, tmp_path) -> Conversation:
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 4
    return Conversation(settings=settings, store=open_store(tmp_path / "s.db"),
                        engine=ChatEngine(tiny), model_spec="tiny")


def turn(conv: Conversation) -> TurnDone:
    return [e for e in conv.turns.send("Hello there.") if isinstance(e, TurnDone)][-1]


def fail_with(exc: BaseException):
    def write_safetensors(fh, tensors, metadata):
        fh.write(b"\0" * 100)  # part of the file, as a full disk leaves it
        raise exc
    return write_safetensors


def check_warned(conv: Conversation, done: TurnDone, words: str) -> None:
    assert done.stats.snapshot_warning == f"snapshot not saved: {words}"
    assert done.stats.snapshot_warning in transcript_stats_line(done.stats)
    reply = conv.messages[-1]
    assert reply.role == "assistant" and not reply.cancelled and reply.content == done.reply
    # Stored with the reply: a reopened session still says why it recomputes.
    again = conv.store.get_session(conv.session.id).messages[-1]
    assert again.id == reply.id and again.stats.snapshot_warning == done.stats.snapshot_warning
    assert conv.store.segments.on_branch(conv.session.leaf_id) == []
    folder = paths.kv_dir()
    assert not folder.is_dir() or not [p for p in folder.iterdir() if ".tmp." in p.name]


@pytest.mark.parametrize("exc,words", [
    (RuntimeError("[save_safetensors] Unable to write 4096 bytes to file."), "disk full"),
    (OSError(errno.ENOSPC, "No space left on device"), "disk full"),
])
def test_a_full_disk_during_the_write_is_a_warning(tiny, tmp_path, monkeypatch, exc, words):
    monkeypatch.setattr(segments_module, "_write_safetensors", fail_with(exc))
    # The disk is full: no byte free where the snapshot goes.
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda _: SimpleNamespace(total=1 << 30, used=1 << 30, free=0))
    conv = make(tiny, tmp_path)
    check_warned(conv, turn(conv), words)
    conv.close()


def test_a_snapshot_folder_that_is_a_file_is_a_warning(tiny, tmp_path):
    folder = paths.kv_dir()
    folder.parent.mkdir(parents=True)
    folder.write_text("in the way")
    conv = make(tiny, tmp_path)
    check_warned(conv, turn(conv), f"{folder} is not a folder")
    conv.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_snapshot_folder_is_a_warning(tiny, tmp_path):
    folder = paths.kv_dir()
    folder.mkdir(parents=True)
    folder.chmod(0o500)
    conv = make(tiny, tmp_path)
    done = turn(conv)
    folder.chmod(0o700)
    assert done.stats.snapshot_warning and "read-only" in done.stats.snapshot_warning
    conv.close()


def test_ask_json_reports_the_unsaved_snapshot(tiny_model_dir, monkeypatch, capsys):
    monkeypatch.setattr(segments_module, "_write_safetensors", fail_with(
        RuntimeError("[save_safetensors] Unable to write 4096 bytes to file.")))
    code = cli.main(["ask", "--session", "demo", "--model", str(tiny_model_dir),
                     "--max-tokens", "4", "--temp", "0", "--json", "hello"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["snapshot_warning"].startswith("snapshot not saved: ")
    assert data["finish_reason"] in ("stop", "length") and "Traceback" not in err
