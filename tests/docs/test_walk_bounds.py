"""Nothing outside the folders given to a collection is read unless the user
says so: symlinks out of them (to a folder, a file, /etc/passwd, /etc, a
device) are skipped and named, FIFOs, sockets and devices are named and
never opened; with --follow-links they are followed, and updates keep doing so."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from mlxchat.cli.main import main
from mlxchat.docs import Indexer
from mlxchat.docs.walk import walk
from mlxchat.store import open_store

from tests.docs.conftest import tiny_embedder

SECRET = "The vault code is 4711, never to be indexed."


def _folders(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(SECRET + "\n")
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "notes.md").write_text("# Notes\n\nOnly this folder is mine to index.\n")
    (root / "sub" / "inner.md").write_text("Inside the folder, reached twice.\n")
    (root / "link").symlink_to("../outside", target_is_directory=True)
    (root / "f.md").symlink_to("../outside/secret.md")
    (root / "p").symlink_to("/etc/passwd")
    (root / "etc").symlink_to("/etc", target_is_directory=True)
    (root / "zero").symlink_to("/dev/zero")
    (root / "gone.md").symlink_to("nowhere.md")
    (root / "alias").symlink_to("sub", target_is_directory=True)  # stays inside: followed
    os.mkfifo(root / "pipe.md")  # opened for reading, it would block until a writer came
    return root


@pytest.fixture
def unix_socket(tmp_path):
    sock = socket.socket(socket.AF_UNIX)
    path = tmp_path / "notes" / "control.sock"
    yield sock, path
    sock.close()


def _reasons(report) -> dict[str, str]:
    return {os.path.basename(s.path): s.reason for s in report.skipped}


def test_nothing_outside_the_folder_is_read(tmp_path, store, tiny_embed, unix_socket):
    root = _folders(tmp_path)
    unix_socket[0].bind(str(unix_socket[1]))
    report = Indexer(store.documents, tiny_embed).add("n", [root])
    files = sorted(os.path.relpath(p, root) for p in
                   store.documents.files(store.documents.get("n").id))
    assert files == ["alias/inner.md", "notes.md"]  # inner.md once: its folder seen twice
    assert not any("4711" in text or "root:" in text for text in tiny_embed.embedded)
    reasons = _reasons(report)
    for name, target in (("link", tmp_path / "outside"), ("f.md", tmp_path / "outside/secret.md"),
                         ("p", Path("/etc/passwd")), ("etc", Path("/etc")),
                         ("zero", Path("/dev/zero"))):
        assert reasons[name] == (f"a symlink to {os.path.realpath(target)}, outside {root}: "
                                 "not followed (--follow-links follows it)")
    assert reasons["pipe.md"] == "a named pipe (FIFO), not a file: not read"
    assert reasons["control.sock"] == "a socket, not a file: not read"
    assert reasons["gone.md"].startswith("a broken symlink (its target ")
    assert reasons["sub"] == "symlink loop or folder seen twice"
    assert len(report.skipped) == 9  # /etc is one line, not its files


def test_follow_links_reads_outside_and_updates_keep_following(tmp_path, store, tiny_embed):
    root = _folders(tmp_path)
    for name in ("p", "etc", "zero"):
        (root / name).unlink()
    indexer = Indexer(store.documents, tiny_embed)
    report = indexer.add("n", [root], follow_links=True)
    paths = set(store.documents.files(store.documents.get("n").id))
    assert {str(root / "f.md"), str(root / "notes.md")} <= paths
    assert any("4711" in text for text in tiny_embed.embedded)
    assert str(root / "link" / "secret.md") not in paths  # the same file as f.md, once
    assert _reasons(report)["pipe.md"] == "a named pipe (FIFO), not a file: not read"
    assert store.documents.get("n").follow_links
    again = indexer.update("n")
    assert again.files_removed == 0 and again.files_unchanged == len(paths)


def test_a_fifo_or_device_given_as_a_path_is_named_not_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    found = walk([tmp_path / "pipe", Path("/dev/zero")])
    assert found.files == []
    assert [s.reason for s in found.skipped] == ["a named pipe (FIFO), not a file: not read",
                                                 "a device, not a file: not read"]


def test_docs_add_names_each_skipped_link(tmp_path, capsys, monkeypatch):
    root = _folders(tmp_path)
    monkeypatch.setattr("mlxchat.docs.embedder.default_embedder", tiny_embedder)
    assert main(["docs", "add", "n", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("n: 2 files indexed")
    for name in ("link", "f.md", "p", "etc", "zero", "pipe.md", "gone.md"):
        assert f"  skipped {root / name}: " in out
    assert "--follow-links follows it" in out
    with open_store() as kept:
        assert not kept.documents.get("n").follow_links
    assert main(["docs", "add", "m", str(root / "link"), "--follow-links"]) == 0
    with open_store() as kept:
        assert kept.documents.get("m").follow_links
