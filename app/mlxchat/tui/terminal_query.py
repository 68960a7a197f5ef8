"""Asking the terminal what it draws, before Textual reads stdin, without
losing what the user types meanwhile.

The queries go out together, the Kitty graphics query first and the DA1
request last: a terminal answers in order and every terminal answers DA1, so
its reply closes the exchange. stdin is read one byte at a time until that
reply has come (or ``timeout`` passed): the keys read on the way are kept, in
order, with the replies taken out, for the app to replay; the keys typed after
it stay unread, for Textual. Never run inside tmux or screen: they answer DA1
themselves and pass neither protocol, so asking only races the keys."""

from __future__ import annotations

import os
import re
import select
import termios
import time
import tty
from codecs import getincrementaldecoder
from collections.abc import Mapping
from dataclasses import dataclass

DA1_REQUEST = "\x1b[c"
KITTY_QUERY = "\x1b_Gi=31,s=1,v=1,a=q,t=d,f=24;AAAA\x1b\\"
"""A one-pixel image to query, not to keep: a Kitty terminal answers 'OK'."""
_DA1_REPLY = re.compile(rb"\x1b\[\?([\d;]*)c")
_KITTY_REPLY = re.compile(rb"\x1b_G[^\x1b]*;([^\x1b;]*)\x1b\\")
TIMEOUT_S = 1.0
"""How long to wait for the DA1 reply: a local terminal answers in
milliseconds; a busy machine or an SSH link can take a few hundred."""


@dataclass(frozen=True)
class TerminalAnswers:
    attributes: tuple[str, ...] | None
    """The DA1 reply's parameters ('4' among them: Sixel); None when none came."""
    graphics: str | None
    """The Kitty graphics reply's status ('OK' where it draws); None when none came."""
    typed: str
    """Keys read while waiting for the replies, in order, the replies taken out."""

    @property
    def sixel(self) -> bool:
        return "4" in (self.attributes or ())

    @property
    def kitty(self) -> bool:
        return self.graphics == "OK"


def in_multiplexer(env: Mapping[str, str]) -> bool:
    """tmux or screen: they carry the outer terminal's variables, not its graphics."""
    return bool(env.get("TMUX") or env.get("STY")
                or env.get("TERM", "").startswith(("screen", "tmux")))


def ask(stdin: int, stdout: int, *, timeout: float = TIMEOUT_S) -> TerminalAnswers:
    """Send the queries on ``stdout`` and read ``stdin`` until DA1 is answered."""
    saved = termios.tcgetattr(stdin)
    tty.setcbreak(stdin, termios.TCSANOW)  # unechoed, a byte at a time; Enter stays "\n"
    try:
        os.write(stdout, (KITTY_QUERY + DA1_REQUEST).encode())
        read = _read_until_da1(stdin, time.monotonic() + timeout)
    finally:
        termios.tcsetattr(stdin, termios.TCSANOW, saved)
    da1 = _DA1_REPLY.search(read)
    kitty = _KITTY_REPLY.search(read)
    keys = _KITTY_REPLY.sub(b"", _DA1_REPLY.sub(b"", read))
    return TerminalAnswers(
        attributes=tuple(da1.group(1).decode().split(";")) if da1 else None,
        graphics=kitty.group(1).decode() if kitty else None,
        typed=getincrementaldecoder("utf-8")("replace").decode(keys, final=True))


def _read_until_da1(fd: int, deadline: float) -> bytes:
    """Every byte up to the end of the DA1 reply, none after it."""
    read = b""
    while not (read.endswith(b"c") and _DA1_REPLY.search(read)):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        byte = os.read(fd, 1)
        if not byte:
            break
        read += byte
    return read
