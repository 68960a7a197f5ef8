"""The probe before the app starts, on a real pseudo-terminal this test plays
the terminal of: the replies it gives (Sixel in DA1, 'OK' to a Kitty graphics
query, or none) choose the picture; the keys typed before and after the
replies all reach the app, in order, and no reply does; inside tmux or screen,
or with TERM=dumb, nothing is asked and nothing is read."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import tty
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import os, select
from mlxchat.tui.pictures import probe, typed_ahead
found = probe("auto")
kept = "".join(e.character or "" for e in typed_ahead())  # what the app replays
rest = b""  # what Textual's driver would read next (all of it was written up front)
while select.select([0], [], [], 0)[0]:
    rest += os.read(0, 1024)
print(f"PROBED={found}")
print(f"KEYS={(kept + rest.decode()).encode().hex()}")
"""


def _probe_on_pty(replies: str, term: str = "xterm-256color",
                  **env_more: str) -> tuple[str, str, str]:
    """Run ``probe('auto')`` in a child on a pty whose input already holds
    ``replies`` (and keys); what it printed (the queries among it), what it
    found, and the keys the app would get: those the probe kept, then the rest."""
    master, slave = os.openpty()
    # 24x80 cells of 10x20 pixels: the cell size comes from the ioctl, not a query.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 800, 480))
    tty.setraw(slave)  # so the replies reach a read at once, unechoed
    os.write(master, replies.encode())
    env = {k: v for k, v in os.environ.items()
           if k not in ("TMUX", "STY", "TERM_PROGRAM", "KITTY_WINDOW_ID")}
    env.update({"TERM": term, "PYTHONPATH": str(ROOT / "app"), **env_more})
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
    keys = re.search(r"KEYS=([0-9a-f]*)", text)
    return text, found, bytes.fromhex(keys.group(1) if keys else "").decode()


SIXEL = "\x1b[?62;4;22c"  # foot, WezTerm, xterm -ti vt340
KITTY = "\x1b_Gi=31;OK\x1b\\\x1b[?62;22c"  # Kitty, Ghostty: no Sixel, graphics OK
TMUX = "\x1b[?1;2c"  # what tmux answers DA1 with, itself


@pytest.mark.parametrize(("replies", "found"), [
    (SIXEL, "sixel"),
    (KITTY, "kitty"),
    ("", "None"),  # no reply at all: half-blocks
])
def test_the_terminals_replies_choose_the_picture(replies, found):
    written, probed, keys = _probe_on_pty(replies)
    assert probed == found and keys == ""
    # Both queries in one go, DA1 last: its reply closes the exchange.
    assert "\x1b_G" in written and written.index("\x1b_G") < written.index("\x1b[c")


@pytest.mark.parametrize("replies", [SIXEL, KITTY, TMUX, ""])
def test_keys_typed_around_the_replies_all_reach_the_app_in_order(replies):
    """Typed before the terminal answered (the probe reads them on its way to
    the reply and keeps them) and after it (left unread for Textual): every
    key, in order; no byte of the reply. textual-image's own probe lost the
    first key of each query and left a late reply in the input."""
    before, after = "ABCDEFGH early typing é", " test\r"
    _, _, keys = _probe_on_pty(before + replies + after)
    assert keys == before + after
    assert "\x1b" not in keys


@pytest.mark.parametrize("where", [{"TMUX": "/tmp/tmux-0/default,1,0"}, {"STY": "1.pts-0"},
                                   {"TERM": "screen-256color"}, {"TERM": "tmux-256color"}])
def test_inside_a_multiplexer_nothing_is_asked_and_no_key_is_read(where):
    """tmux and screen answer DA1 themselves and pass neither protocol."""
    written, probed, keys = _probe_on_pty("Hello from make run\r", **where)
    assert probed == "None" and keys == "Hello from make run\r"
    assert "\x1b[" not in written.split("PROBED=")[0]


def test_a_dumb_terminal_is_not_asked():
    written, probed, keys = _probe_on_pty("\x1b[?62;4c", term="dumb")
    assert probed == "None" and "\x1b[" not in written.split("PROBED=")[0]
