"""The tool loop as the app runs it, on the turn's worker thread: before a
message, the session's MCP servers are waited for (progress on the activity
line); after each reply, its calls go through the consent dialog and run
(escape stops a call), their results are shown folded, and the turn that
reads them streams like any other."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from mlxchat.session.tool_loop import Consent, ConsentRequest, ToolStep
from mlxchat.tui.failures import error_text
from mlxchat.tui.screens import ToolConsentScreen

if TYPE_CHECKING:
    from mlxchat.engine.events import TurnDone

WAIT_S = 0.1


class ToolSteps:
    """One per app; every method but the dialog's callback on a worker thread."""

    def __init__(self, app: Any):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""

    def prepare(self) -> None:
        """Before a message: the servers the session uses are up (or said to
        have failed, once), so the message's prompt holds their tools."""
        app, conv = self.app, self.app.conversation
        if conv is None or not conv.tools.choice:
            return
        lines = conv.tools.ready(progress=lambda text, done, total: app._ui(
            app.activity.show, text + "…", done, total))
        app._ui(app.activity.hide)
        for line in lines:
            app._ui(app.transcript.add_notice, line, "warning")

    def after(self, done: TurnDone) -> ToolStep | None:
        """The reply's calls run (each asked first); None when it called none."""
        app, conv = self.app, self.app.conversation
        if conv is None:
            return None
        try:
            return conv.tool_loop.step(done, consent=self.ask,
                                       on_call=lambda text: app._ui(app.activity.show, text))
        except Exception as exc:  # noqa: BLE001 - the results could not go to the model
            return ToolStep(notice=error_text(exc))
        finally:
            app._ui(app.activity.hide)

    def ask(self, request: ConsentRequest) -> Consent:
        """The consent dialog, waited for; a stop or a quit meanwhile denies."""
        app, conv = self.app, self.app.conversation
        answered = threading.Event()
        answer: list[Consent] = []
        screen = ToolConsentScreen(request, session_grants=conv.tools.session_grants)

        def done(consent: Consent | None) -> None:
            answer.append(consent or Consent("deny"))
            answered.set()
        app._ui(app.push_screen, screen, done)
        while not answered.wait(WAIT_S):
            if conv.tools.cancel_event.is_set():
                app._ui(self._close, screen)
                return Consent("deny")
        return answer[0]

    def _close(self, screen: ToolConsentScreen) -> None:
        if screen.is_attached and screen is self.app.screen:
            screen.dismiss(Consent("deny"))
