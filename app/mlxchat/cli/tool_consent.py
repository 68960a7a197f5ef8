"""Consent to a tool call without the app: asked on the terminal
(``/dev/tty``, so stdin and stdout may be pipes), or, with no terminal,
refused in one line unless ``--allow-tools`` names the tool."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from mlxchat.session.tool_loop import Consent, ConsentRequest

TTY = "/dev/tty"
ANSWERS = {"a": "once", "s": "session", "e": "everywhere", "d": "deny", "": "deny"}


class TerminalConsent:
    """Asks each call's consent on the terminal; ``allowed`` tools (TOOL or
    SERVER.TOOL) run without asking."""

    def __init__(self, allowed: Iterable[str] = (), *, session_grants: bool = True,
                 tty: str | None = None) -> None:
        self.allowed = {a.strip() for a in allowed if a.strip()}
        self.session_grants = session_grants
        self.tty = tty or TTY

    def __call__(self, request: ConsentRequest) -> Consent:
        tool = request.tool
        if tool.qualified in self.allowed or tool.name in self.allowed:
            return Consent("once")
        opened = self._open()
        if opened is None:
            print(f"mlxchat: refused {tool.qualified}: there is no terminal to ask "
                  f"(--allow-tools {tool.qualified} lets it run)", file=sys.stderr)
            return Consent("deny", "no one could be asked (no terminal), so it was refused")
        reader, writer = opened
        with reader, writer:
            return self._ask(reader, writer, request)

    def _open(self):
        """The terminal as (reader, writer): it does not seek, so one of each; None without."""
        try:
            reader = open(self.tty, encoding="utf-8")
        except OSError:
            return None
        try:
            return reader, open(self.tty, "w", encoding="utf-8")
        except OSError:
            reader.close()
            return None

    def _ask(self, reader, terminal, request: ConsentRequest) -> Consent:
        tool = request.tool
        hints = ", ".join(tool.hints()) or "nothing"
        choices = "[a]llow once, " + ("allow in this [s]ession, " if self.session_grants
                                       else "") + "allow [e]verywhere, [d]eny, deny with [r]eason"
        terminal.write(f"\nThe model wants to run {tool.qualified}"
                       + (f": {tool.description.splitlines()[0]}" if tool.description else "")
                       + f"\nThe server says it is: {hints} (its own claim, not checked)\n"
                       + request.arguments_text() + "\n")
        while True:
            terminal.write(choices + "? ")
            terminal.flush()
            line = reader.readline()
            if not line:  # the terminal closed
                return Consent("deny")
            key = line.strip().lower()[:1]
            if key == "r":
                terminal.write("why (the model is told): ")
                terminal.flush()
                return Consent("deny", reader.readline().strip())
            if key in ANSWERS and (key != "s" or self.session_grants):
                return Consent(ANSWERS[key])  # type: ignore[arg-type]
