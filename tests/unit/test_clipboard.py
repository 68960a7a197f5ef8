"""Copying text out: each clipboard tool that works here is used and named."""

from __future__ import annotations

import os
import stat

import pytest

from mlxchat import clipboard


def fake_tool(folder, name: str, out) -> None:
    """A real executable that keeps what it is given (as the real tool would copy it)."""
    path = folder / name
    path.write_text(f"#!/bin/sh\nexec /bin/cat > {out}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    for name in ("WAYLAND_DISPLAY", "DISPLAY", "TMUX"):
        monkeypatch.delenv(name, raising=False)
    return folder


def test_the_system_tool_and_tmux_and_the_terminal_are_each_named(bin_dir, tmp_path,
                                                                  monkeypatch):
    fake_tool(bin_dir, "xclip", tmp_path / "x.txt")
    fake_tool(bin_dir, "tmux", tmp_path / "t.txt")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")
    sent: list[str] = []
    ways = clipboard.copy("héllo", terminal=sent.append)
    assert ways == ["xclip", "tmux's buffer (prefix ] pastes)",
                    "the terminal (OSC 52, if it allows it)"]
    assert (tmp_path / "x.txt").read_text() == "héllo" == (tmp_path / "t.txt").read_text()
    assert sent == ["héllo"]
    assert clipboard.said(ways).startswith("with xclip and tmux's buffer")


def test_a_tool_without_its_display_is_not_tried(bin_dir, tmp_path):
    fake_tool(bin_dir, "xclip", tmp_path / "x.txt")
    with pytest.raises(clipboard.ClipboardError, match="No clipboard here"):
        clipboard.copy("text")  # no DISPLAY, no terminal
    assert not os.path.exists(tmp_path / "x.txt")
    assert clipboard.copy("text", terminal=lambda _: None) == [
        "the terminal (OSC 52, if it allows it)"]
