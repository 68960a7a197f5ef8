"""Prefill while the user types: when to ask the conversation for it.

Debounced: ``DEBOUNCE_S`` after the first keystroke of a burst (steady typing
never waits for a pause), the text as it is then is prefilled up to its last
whitespace, once per finished word; a paste, an ``/attach``ed file or the
end of a reply starts one at once. Nothing runs while a reply is generating,
a command runs or the last message is being edited; a send supersedes it
in the engine. The gauges show how many tokens are prefilled.
"""

from __future__ import annotations

from typing import Any

from textual.css.query import NoMatches
from textual.timer import Timer

from mlxchat.session.typing_ahead import settled_text

DEBOUNCE_S = 0.25
"""Seconds from a keystroke to the prefill of the text as it is then."""


class TypingTimer:
    """One per app; every method runs on the UI thread."""

    def __init__(self, app: Any, debounce_s: float = DEBOUNCE_S):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""
        self.debounce_s = debounce_s
        self._timer: Timer | None = None
        self._done_for: tuple[str, int] | None = None  # what the cache holds now
        self.tokens = 0
        """Tokens the cache holds from typing prefill (what the gauges show)."""

    def _allowed(self) -> bool:
        app = self.app
        return (app.conversation is not None and not app.generating and not app.running
                and not app.editing)

    def changed(self, text: str, *, at_once: bool = False) -> None:
        """The prompt's text changed (or the history or attachments did: ``at_once``)."""
        if at_once:
            self._done_for = None
        if not self._allowed() or text.lstrip().startswith("/"):
            return
        if at_once:
            self.app.call_later(self._fire)
        elif self._timer is None:  # a pending one will take the text as it is then
            self._timer = self.app.set_timer(self.debounce_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        try:
            text = self.app.prompt.text
        except NoMatches:
            return  # the app is closing
        conv = self.app.conversation
        if conv is None or not self._allowed() or text.lstrip().startswith("/"):
            return
        key = (settled_text(text), len(conv.turns.attachments))
        if key == self._done_for or not (key[0] or key[1]):
            return
        self._done_for = key
        self.app.run_worker(lambda: self._prefill(text), thread=True, group="typing",
                            exit_on_error=False)

    def _prefill(self, text: str) -> None:
        conv = self.app.conversation
        if conv is None:
            return
        try:
            n = conv.typing.prefill_typed(text)
        except Exception:  # noqa: BLE001 - a speed-up only: the send reports real errors
            self.app.log.warning("typing prefill failed", exc_info=True)
            return
        self.app.call_from_thread(self._show, n)

    def _show(self, n: int) -> None:
        if self.app.generating:
            return  # the send took them: its stats say so
        self.tokens = n
        conv = self.app.conversation
        if conv is not None:  # Context and KV cache now hold the typed-ahead tokens too
            self.app.gauges.update_state(conv.views.state(), self.app.budget_bytes)
        self.app.gauges.typing_prefill(n)
