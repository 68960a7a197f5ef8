"""The consent dialog before a tool runs: which server's tool, what it does,
the arguments the model gave (pretty-printed), the server's own hints
labelled as its claims, and the answers: allow once, allow always (this
session or everywhere), deny, or deny and tell the model why. Nothing runs
before an answer; escape denies."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from mlxchat.session.tool_loop import Consent, ConsentRequest

MAX_ARGUMENT_CHARS = 20_000
"""What the dialog shows of the arguments at most (the model gets them all)."""


class ToolConsentScreen(ModalScreen[Consent]):
    """Dismisses with the user's Consent."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "answer('once')", "Allow once", show=False),
        Binding("s", "answer('session')", "Always in this session", show=False),
        Binding("e", "answer('everywhere')", "Always", show=False),
        Binding("d,escape", "answer('deny')", "Deny", show=False),
        Binding("r", "reason", "Deny and say why", show=False),
    ]

    def __init__(self, request: ConsentRequest, *, session_grants: bool = True) -> None:
        super().__init__(classes="dialog-screen")
        self.request = request
        self.session_grants = session_grants

    def compose(self) -> ComposeResult:
        tool = self.request.tool
        hints = ", ".join(tool.hints()) or "nothing"
        args = self.request.arguments_text()
        if len(args) > MAX_ARGUMENT_CHARS:
            args = args[:MAX_ARGUMENT_CHARS] + f"\n… ({len(args):,} characters in all)"
        with Vertical(classes="dialog", id="consent-dialog"):
            yield Static(f"The model wants to run {tool.qualified}", classes="dialog-heading",
                         markup=False, id="consent-tool")
            if tool.description:
                yield Static(tool.description, markup=False, id="consent-description")
            yield Static(f"The server says it is: {hints} (its own claim, not checked)",
                         classes="dialog-hint", markup=False, id="consent-hints")
            with VerticalScroll(id="consent-arguments"):
                yield Static(args, markup=False, id="consent-arguments-text")
            reason = Input(placeholder="why (the model is told), then enter", id="consent-reason")
            reason.display = False  # shown by "r"
            yield reason
            with Horizontal(classes="dialog-buttons"):
                yield Button("Allow once (a)", id="once", variant="primary")
                if self.session_grants:
                    yield Button("Always here (s)", id="session")
                yield Button("Always (e)", id="everywhere")
                yield Button("Deny (d)", id="deny", variant="error")
                yield Button("Deny, say why (r)", id="reason")

    def on_mount(self) -> None:
        # The safe answer has focus: a stray enter runs nothing.
        self.query_one("#deny", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "reason":
            self.action_reason()
        else:
            self.action_answer(event.button.id or "deny")

    def action_answer(self, answer: str) -> None:
        if answer == "session" and not self.session_grants:
            return
        self.dismiss(Consent(answer))  # type: ignore[arg-type]

    def action_reason(self) -> None:
        field = self.query_one("#consent-reason", Input)
        field.display = True
        field.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(Consent("deny", event.value.strip()))
