"""The probe before the app starts, on a real pseudo-terminal this test plays
the terminal of: the replies it gives (Sixel in DA1, 'OK' to a Kitty graphics
query, or none) choose the picture; TERM=dumb asks nothing."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import tty
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = "from mlxchat.tui.pictures import probe; print(f'PROBED={probe(\"auto\")}')"


def _probe_on_pty(replies: str, term: str = "xterm-256color") -> tuple[str, str]:
    """Run ``probe('auto')`` in a child on a pty whose input already holds
    ``replies``; what it printed (the queries among it) and what it found."""
    master, slave = os.openpty()
    # 24x80 cells of 10x20 pixels: the cell size comes from the ioctl, not a query.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 800, 480))
    tty.setraw(slave)  # so the replies reach a read at once, unechoed
    os.write(master, replies.encode())
    env = {k: v for k, v in os.environ.items()
           if k not in ("TMUX", "STY", "TERM_PROGRAM", "KITTY_WINDOW_ID")}
    env.update(TERM=term, PYTHONPATH=str(ROOT / "app"))
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=slave, stdout=slave,
                             stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            out += chunk
    finally:
        child.wait(timeout=120)
        os.close(master)
    text = out.decode(errors="replace")
    found = text.rsplit("PROBED=", 1)[1].split()[0] if "PROBED=" in text else "(nothing)"
    return text, found


@pytest.mark.parametrize(("replies", "found"), [
    ("\x1b[?62;4;22c", "sixel"),  # foot, WezTerm, xterm -ti vt340
    ("\x1b[?62;22c\x1b_Gi=31;OK\x1b\\", "kitty"),  # Kitty, Ghostty: no Sixel, graphics OK
    ("", "None"),  # no reply at all (tmux without passthrough): half-blocks
])
def test_the_terminals_replies_choose_the_picture(replies, found):
    written, probed = _probe_on_pty(replies)
    assert probed == found
    assert "\x1b[c" in written  # it asked for the DA1 reply
    assert ("\x1b_G" in written) == (found != "sixel")  # and for Kitty graphics unless Sixel


def test_a_dumb_terminal_is_not_asked():
    written, probed = _probe_on_pty("\x1b[?62;4c", term="dumb")
    assert probed == "None" and "\x1b[" not in written
