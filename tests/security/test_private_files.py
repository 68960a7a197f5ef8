"""Every folder the app creates is 0700, temp snapshot files are 0600 from the
first byte, and temp files of killed writes are cleaned up (issue 9, item 6)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.config import Settings, save_settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.disk import segments as segments_module
from mlxchat.engine.events import TurnDone
from mlxchat.models.gguf.importer import import_gguf_cached
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

from tests.models.test_gguf_import import source, write  # noqa: F401


@pytest.fixture
def loose_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def turn(tiny) -> None:  # noqa: F811
    settings = Settings(system_prompt="Be brief.")
    settings.generation.max_tokens = 4
    conv = Conversation(settings=settings, store=open_store(), engine=ChatEngine(tiny),
                        model_spec="tiny")
    assert [e for e in conv.turns.send("Hello.") if isinstance(e, TurnDone)]
    conv.close()
    conv.store.close()


def test_every_folder_the_app_creates_is_private(tiny, source, tmp_path, monkeypatch,  # noqa: F811
                                                 loose_umask):
    home = tmp_path / "not" / "yet" / "home"
    monkeypatch.setenv("MLXCHAT_HOME", str(home))
    turn(tiny)  # the store, its folder, the snapshots folder
    save_settings(Settings())
    write(tmp_path / "m.gguf", source, "F32")
    import_gguf_cached(tmp_path / "m.gguf")
    created = [home, home / "data", home / "data" / "snapshots", home / "config",
               home / "cache", home / "cache" / "models"]
    assert {str(p.relative_to(tmp_path)): oct(mode(p)) for p in created} == {
        str(p.relative_to(tmp_path)): "0o700" for p in created}
    models = [p for p in (home / "cache" / "models").iterdir() if p.is_dir()]
    assert models and all(mode(p) == 0o700 for p in models)


def test_temp_snapshot_files_are_private_from_the_first_byte(tiny, monkeypatch,  # noqa: F811
                                                            loose_umask):
    seen: list[int | None] = []
    real = segments_module._write_safetensors

    def watched(fh, tensors, metadata):
        seen.append(stat.S_IMODE(os.fstat(fh.fileno()).st_mode))  # before the first byte
        out = real(fh, tensors, metadata)
        seen.append(stat.S_IMODE(os.fstat(fh.fileno()).st_mode))
        return out
    monkeypatch.setattr(segments_module, "_write_safetensors", watched)
    turn(tiny)
    assert seen == [0o600, 0o600]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temp_files_of_killed_writes_are_removed_on_open(tmp_path):
    folder = paths.ensure_private_dir(paths.kv_dir())
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        files = {
            "dead": folder / f".session-1-2.{dead_pid()}.tmp.safetensors",
            "writing": folder / f".session-1-3.{alive.pid}.tmp.safetensors",
            "old": folder / f".session-1-4.{alive.pid}.tmp.safetensors",
            "snapshot": folder / "session-1-5.safetensors",
            "other": folder / "notes.txt",
        }
        for path in files.values():
            path.write_bytes(b"\0" * 64)
        hour_ago = time.time() - 3600
        os.utime(files["old"], (hour_ago, hour_ago))
        open_store().close()
        left = {name for name, path in files.items() if path.exists()}
        assert left == {"writing", "snapshot", "other"}
    finally:
        alive.kill()
        alive.wait()
