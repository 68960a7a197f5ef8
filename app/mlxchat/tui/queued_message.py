"""A message sent while the model loads: shown as pending, sent once the model
is ready and nothing else runs, or withdrawn (escape) back into the input."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlxchat.tui.widgets import UserMessage


class QueuedMessage:
    """One per app, on the UI thread. Its text is the app's ``queued``
    reactive (the keys that apply depend on it)."""

    def __init__(self, app: Any):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""
        self._widget: UserMessage | None = None

    def queue(self, text: str) -> None:
        app = self.app
        if app.queued is not None:
            return app.refuse(text, "A message is already waiting for the model; escape "
                                    "withdraws it.")
        app.queued = text
        app.call_next(self.show)
        app.notify("The model is still loading: your message goes once it is ready "
                   "(escape withdraws it).")

    async def show(self) -> None:
        app = self.app
        # A reload of the transcript (the session opening) took an earlier one off.
        if app.queued is not None and (self._widget is None or not self._widget.is_attached):
            self._widget = await app.transcript.add_user(app.queued, pending=True)

    def drop(self) -> str | None:
        """Forget the waiting message and take it off the screen; its text."""
        text, self.app.queued = self.app.queued, None
        if self._widget is not None:
            self._widget.remove()
            self._widget = None
        return text

    def take_back(self) -> str | None:
        """Forget the waiting message and put it back in the input."""
        text = self.drop()
        if text is not None and not self.app.prompt.text:
            self.app.prompt.restore(text)
        return text

    def send_when_ready(self) -> None:
        """Send the waiting message once the model is ready and nothing else runs."""
        app = self.app
        if app.queued is None or app.conversation is None or app.running or app.generating:
            return
        text = self.drop()  # shown again as sent, or back in the input
        assert text is not None
        app.submit(text)
