"""The multi-line prompt, with a slash-command completion list above it.

Keys: Enter sends; ctrl+j (every terminal), alt+enter and shift+enter (terminals
with the kitty keyboard protocol) insert a newline; up in an empty prompt asks
to edit the last message. While completions show: up/down move, tab accepts
(enter too, once up/down picked an item), escape closes.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import OptionList, TextArea
from textual.widgets.option_list import Option

from mlxchat.commands import Completion

NEWLINE_KEYS = frozenset({"ctrl+j", "alt+enter", "shift+enter"})
"""A legacy terminal sends alt+enter as ESC CR, which Textual reads as a plain
enter; ctrl+j (a bare LF) is the one newline key every terminal delivers."""

CompletionSource = Callable[[str], "list[Completion]"]
"""``complete(text)`` -> completions for the whole input text (which starts with '/')."""


class CompletionList(OptionList, can_focus=False):
    """The dropdown; it never takes focus, the prompt keeps typing into the text area."""


class PromptArea(TextArea):
    """The text area; keys the prompt owns are handled before TextArea's own."""

    async def _on_key(self, event: events.Key) -> None:
        prompt = self.parent
        if isinstance(prompt, PromptInput) and prompt.process_key(event.key):
            event.stop()
            event.prevent_default()  # TextArea's own _on_key (enter inserts "\n") is skipped
        elif not event.is_printable and await self.app._check_bindings(event.key):
            # An editing key (backspace, ctrl+u, an arrow) is a binding: left to
            # bubble, it would reach the app's queue behind the characters that
            # came in the same read, and apply after them. Run it now, in order.
            event.stop()
            event.prevent_default()

    async def _on_paste(self, event: events.Paste) -> None:
        prompt = self.parent
        if isinstance(prompt, PromptInput):
            prompt.pasting = True
        await super()._on_paste(event)


class PromptInput(Vertical):
    """Posts ``Submitted(text)`` on Enter and ``EditLast()`` on up in an empty prompt."""

    class Submitted(Message):
        def __init__(self, prompt: PromptInput, text: str) -> None:
            super().__init__()
            self.prompt = prompt
            self.text = text

        @property
        def control(self) -> PromptInput:
            return self.prompt

    class Edited(Message):
        """The text changed; ``at_once`` for a paste (no need to wait for a pause)."""

        def __init__(self, prompt: PromptInput, text: str, at_once: bool) -> None:
            super().__init__()
            self.prompt = prompt
            self.text = text
            self.at_once = at_once

        @property
        def control(self) -> PromptInput:
            return self.prompt

    class EditLast(Message):
        def __init__(self, prompt: PromptInput) -> None:
            super().__init__()
            self.prompt = prompt

        @property
        def control(self) -> PromptInput:
            return self.prompt

    DEFAULT_CSS = """
    PromptInput { height: auto; }
    PromptInput > CompletionList { display: none; height: auto; max-height: 10; }
    PromptInput.-completing > CompletionList { display: block; }
    PromptInput > PromptArea {
        height: auto; min-height: 3; max-height: 12;
        border-subtitle-color: $text-accent; border-subtitle-align: left;
    }
    """

    def __init__(self, complete: CompletionSource | None = None, *,
                 placeholder: str = "Message  (/ for commands · ctrl+j newline)",
                 clear_on_submit: bool = True, cursor_blink: bool = True,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.complete = complete
        """``complete(text) -> list[Completion]``; may be set after construction."""
        self.clear_on_submit = clear_on_submit
        self._placeholder = placeholder
        self._cursor_blink = cursor_blink
        self._completions: list[Completion] = []
        self._dismissed_for: str | None = None  # text on which escape closed the list
        self._completed_for: str | None = None  # text the list was computed for
        self._navigated = False  # up/down moved in the list since it was computed
        self.pasting = False  # the next change comes from a paste
        self._early = False  # keys typed while the app started are being handled

    def compose(self) -> ComposeResult:
        yield CompletionList()
        area = PromptArea(soft_wrap=True, show_line_numbers=False, tab_behavior="focus",
                          placeholder=self._placeholder, highlight_cursor_line=False)
        area.cursor_blink = self._cursor_blink
        yield area

    @property
    def area(self) -> PromptArea:
        return self.query_one(PromptArea)

    @property
    def text(self) -> str:
        return self.area.text

    @text.setter
    def text(self, value: str) -> None:
        area = self.area
        area.load_text(value)
        area.move_cursor(area.document.end)

    def clear(self) -> None:
        self.text = ""

    def restore(self, text: str) -> None:
        """Put refused text back, all selected: Enter sends it again, typing
        replaces it (never glued to it), an arrow key keeps it for editing. A
        refused command's completions stay closed until it is edited: they
        would cover the error that says why."""
        self._dismissed_for = text
        area = self.area
        area.load_text(text)
        area.select_all()

    def show_pending(self, line: str | None) -> None:
        """Under the input, what goes with the next message (None: nothing)."""
        self.area.border_subtitle = line

    def catch_early_keys(self) -> None:
        """From the app's ``on_mount``: take the focus now, not after a refresh,
        so the keys typed while the app started (queued already) land here. Those
        typed before the terminal left cooked mode had Enter turned into ctrl+j
        (ICRNL): among them, ctrl+j sends, as Enter was meant to."""
        self.screen.set_focus(self.area)
        self._early = True

        def caught() -> None:
            self._early = False
        # Behind the queued keys in the app's queue, then in the text area's.
        self.app.call_later(self.area.call_later, caught)

    def focus(self, scroll_visible: bool = True) -> PromptInput:
        self.area.focus(scroll_visible)
        return self

    @property
    def completions(self) -> list[Completion]:
        """What the list shows now (empty when closed)."""
        return list(self._completions) if self.has_class("-completing") else []

    # -- completion --------------------------------------------------------------

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        event.stop()
        self.refresh_completions()
        at_once, self.pasting = self.pasting, False
        self.post_message(self.Edited(self, self.text, at_once))

    def refresh_completions(self) -> None:
        self._navigated = False
        text = self._completed_for = self.text
        if self._dismissed_for is not None and text != self._dismissed_for:
            self._dismissed_for = None
        items: list[Completion] = []
        if (self.complete is not None and text.startswith("/") and "\n" not in text
                and self._dismissed_for is None):
            items = list(self.complete(text))
        self._show(items)

    def _show(self, items: list[Completion]) -> None:
        self._completions = items
        option_list = self.query_one(CompletionList)
        option_list.clear_options()
        if items:
            option_list.add_options(
                Option(Text.assemble((c.display, "bold"), "  ", (c.help, "dim")))
                for c in items)
            option_list.highlighted = 0
        self.set_class(bool(items), "-completing")

    def close_completions(self) -> None:
        self._dismissed_for = self.text
        self._show([])

    def _highlighted(self) -> Completion | None:
        index = self.query_one(CompletionList).highlighted
        if not self.completions or index is None:
            return None
        return self._completions[index]

    def accept_completion(self) -> None:
        chosen = self._highlighted()
        if chosen is not None:
            self.text = chosen.value  # fires Changed: the list moves on to arguments

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.accept_completion()
        self.area.focus()

    # -- keys --------------------------------------------------------------------

    def process_key(self, key: str) -> bool:
        """True when the prompt consumed ``key``."""
        if key == "ctrl+j" and self._early:
            key = "enter"
        if key == "enter" and self._completed_for != self.text:
            # Keys typed or pasted fast can outrun the Changed messages that
            # refresh the list: decide on the list for the text as it is now.
            self.refresh_completions()
        if self.completions:
            option_list = self.query_one(CompletionList)
            if key in ("down", "up"):
                if key == "down":
                    option_list.action_cursor_down()
                else:
                    option_list.action_cursor_up()
                self._navigated = True
                return True
            if key == "escape":
                self.close_completions()
                return True
            if key == "tab":
                self.accept_completion()
                return True
            chosen = self._highlighted()
            # Enter takes a completion only once the user moved in the list;
            # otherwise it sends what was typed.
            if (key == "enter" and self._navigated and chosen
                    and chosen.value.strip() != self.text.strip()):
                self.accept_completion()
                return True
        if key == "enter":
            self.submit()
            return True
        if key in NEWLINE_KEYS:
            self.area.insert("\n")
            return True
        if key == "up" and not self.text:
            self.post_message(self.EditLast(self))
            return True
        return False

    def submit(self) -> None:
        text = self.text
        if not text.strip():
            return
        if self.clear_on_submit:
            self.clear()
        self._show([])
        self.post_message(self.Submitted(self, text))
