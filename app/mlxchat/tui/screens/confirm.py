"""A modal yes/no question."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True (yes / y) or False (no / n / escape)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", show=False),
        Binding("n,escape", "answer(False)", "No", show=False),
    ]

    def __init__(self, question: str, *, yes: str = "Yes", no: str = "No",
                 destructive: bool = False) -> None:
        super().__init__(classes="dialog-screen")
        self.question = question
        self.yes_label = yes
        self.no_label = no
        self.destructive = destructive

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="confirm-dialog"):
            yield Static(self.question, id="confirm-question", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.no_label, id="no")
                yield Button(self.yes_label, id="yes",
                             variant="error" if self.destructive else "primary")

    def on_mount(self) -> None:
        # The safe answer has focus: a stray enter does not delete anything.
        self.query_one("#no" if self.destructive else "#yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
