"""ctrl+y: the last reply's answer to the clipboard (the system's tool, tmux's
buffer, the terminal's OSC 52), said in a notice; and the terminal's way for
/copy, which runs on a command's thread."""

from __future__ import annotations

from typing import Any

from mlxchat import clipboard


class ReplyCopy:
    """One per app."""

    def __init__(self, app: Any):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""

    def last_reply(self) -> None:
        """On the UI thread: copy the last reply, never its reasoning."""
        app, conv = self.app, self.app.conversation
        reply = next((m for m in reversed(conv.messages) if m.role == "assistant"),
                     None) if conv else None
        if reply is None or not reply.content:
            app.notify("There is no reply to copy yet.", severity="warning")
            return
        try:
            ways = clipboard.copy(reply.content, terminal=app.copy_to_clipboard)
        except clipboard.ClipboardError as exc:
            app.notify(exc.user_text(), severity="warning")
            return
        app.notify(f"Copied the last reply ({len(reply.content):,} characters) "
                   f"{clipboard.said(ways)}.")

    def from_worker(self, text: str) -> None:
        """For /copy: through the terminal (OSC 52), from the command's thread."""
        self.app._ui(self.app.copy_to_clipboard, text)
