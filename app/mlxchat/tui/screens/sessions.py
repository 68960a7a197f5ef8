"""Browse saved sessions: search as you type, open, rename, delete."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static

from mlxchat.chat import SessionSummary, human_bytes, relative_time
from mlxchat.tui.screens.confirm import ConfirmScreen
from mlxchat.units import fmt_int

COLUMNS = ("Id", "Title", "Model", "Msgs", "Cache", "Last used")
"""Id: what /open, /delete and `mlxchat --session` take ('#12')."""
FIXED_WIDTHS = (6, 8, 10)
"""Msgs ('12,345'), Cache ('123.4 MB'), Last used ('4 days ago', '2026-11-30')."""
RENAME_HINT = "New title, enter saves, esc cancels"
DIALOG_MAX_WIDTH, DIALOG_FRAME, SCROLLBAR = 110, 4, 2
"""The stylesheet's .dialog: 90% wide up to 110, a border and 1 cell of padding a side."""


def short_model(spec: str) -> str:
    """'mlx-community/Qwen3-4B-4bit' -> 'Qwen3-4B-4bit' (a folder: its name)."""
    return spec.rstrip("/").rsplit("/", 1)[-1] or spec


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)].rstrip() + "…"


SearchFn = Callable[[str], "list[SessionSummary] | Awaitable[list[SessionSummary]]"]  # noqa: F821


class SessionTable(DataTable):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "screen.rename", "Rename"),
        Binding("d,delete", "screen.delete", "Delete"),
        Binding("p", "screen.pin", "Pin a file"),
    ]


class SessionsScreen(ModalScreen[int | None]):
    """Dismisses with the chosen session id, or None on escape.

    ``search(text)`` returns the sessions to list ('' means all, newest first);
    it may be sync or async. ``rename(id, title)`` and ``delete(id)`` act on the
    store; ``now()`` is the clock the 'last used' column is measured against.
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close", show=False)]

    def __init__(self, *, search: SearchFn,
                 rename: Callable[[int, str], object] | None = None,
                 delete: Callable[[int], object] | None = None,
                 now: Callable[[], float] = time.time,
                 pin: Callable[[int, str], object] | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self._search = search
        self._rename = rename
        self._delete = delete
        self._pin = pin
        self._now = now
        self.results: list[SessionSummary] = []
        self._renaming: SessionSummary | None = None
        self._pinning = False
        """The rename box asks for a file to pin instead of a title."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="sessions-dialog") as dialog:
            dialog.border_title = "Sessions"
            yield Input(placeholder="Search titles and messages", id="sessions-search")
            yield SessionTable(id="sessions-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="sessions-snippet", markup=False)
            yield Input(id="sessions-rename", placeholder=RENAME_HINT)
            yield Static("enter open · ↓ list · r rename · d delete · p pin · esc close",
                         classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#sessions-rename").display = False
        self.query_one("#sessions-search").focus()
        self.run_search("")

    # -- search ------------------------------------------------------------------

    @on(Input.Changed, "#sessions-search")
    def _search_changed(self, event: Input.Changed) -> None:
        self.run_search(event.value)

    @work(exclusive=True, group="sessions-search")
    async def run_search(self, text: str) -> None:
        """Newer keystrokes cancel older searches (exclusive worker)."""
        try:
            found = self._search(text)
            if inspect.isawaitable(found):
                found = await found
        except Exception as exc:  # noqa: BLE001 - a store error is shown, not raised
            self.notify(f"Search failed: {exc}", severity="error")
            return
        self.show_results(list(found))

    def show_results(self, results: list[SessionSummary]) -> None:
        previous = self.selected()
        row = self.query_one(SessionTable).cursor_row
        self.results = results
        table = self.query_one(SessionTable)
        table.clear(columns=True)
        id_w, title_w, model_w = self._widths(results)
        for label, width in zip(COLUMNS, (id_w, title_w, model_w, *FIXED_WIDTHS)):
            table.add_column(label, width=width)
        now = self._now()
        for s in results:
            pins = (f" · {s.pins} pinned" if s.pins else "") + (" · api" if s.from_api else "")
            table.add_row(Text(f"#{s.id}", style="dim"),
                          Text(cut(s.title, title_w - len(pins))) + Text(pins, style="dim"),
                          Text(cut(short_model(s.model), model_w), style="dim"),
                          Text(fmt_int(s.message_count)),
                          Text(human_bytes(s.snapshot_bytes) if s.snapshot_bytes else "–"),
                          Text(relative_time(s.updated, now)),
                          key=str(s.id))
        # A refresh after rename or delete keeps the cursor on the same session.
        ids = [s.id for s in results]
        if previous is not None and previous.id in ids:
            row = ids.index(previous.id)
        if results:
            table.move_cursor(row=min(row, len(results) - 1), animate=False)
        self._show_snippet()

    def _widths(self, results: list[SessionSummary]) -> tuple[int, int, int]:
        """Id, Title and Model widths: the id and the fixed columns always fit
        (80 columns included); the model gets at most a third of the rest, the
        title the rest."""
        id_w = max((len(f"#{s.id}") for s in results), default=2)
        dialog = min(self.size.width * 9 // 10, DIALOG_MAX_WIDTH) - DIALOG_FRAME
        room = dialog - id_w - sum(FIXED_WIDTHS) - 2 * len(COLUMNS) - SCROLLBAR
        longest = max((len(short_model(s.model)) for s in results), default=5)
        model_w = max(5, min(longest, room // 3))
        return id_w, max(room - model_w, 10), model_w

    def on_resize(self) -> None:
        if self.results:
            self.show_results(self.results)

    def selected(self) -> SessionSummary | None:
        table = self.query_one(SessionTable)
        if not self.results or table.cursor_row is None:
            return None
        return self.results[min(table.cursor_row, len(self.results) - 1)]

    @on(DataTable.RowHighlighted)
    def _show_snippet(self) -> None:
        chosen = self.selected()
        self.query_one("#sessions-snippet", Static).update(chosen.snippet if chosen else "")

    # -- keys --------------------------------------------------------------------

    def on_key(self, event: events.Key) -> None:
        # From the search box, down moves into the list.
        if event.key == "down" and self.focused is self.query_one("#sessions-search"):
            event.stop()
            self.query_one(SessionTable).focus()

    @on(Input.Submitted, "#sessions-search")
    @on(DataTable.RowSelected)
    def action_open(self) -> None:
        chosen = self.selected()
        if chosen is not None:
            self.dismiss(chosen.id)

    def action_close(self) -> None:
        if self._renaming is not None:
            self._end_rename()
        else:
            self.dismiss(None)

    def action_rename(self) -> None:
        chosen = self.selected()
        if chosen is not None and self._rename is not None:
            self._ask(chosen, chosen.title, RENAME_HINT)

    def action_pin(self) -> None:
        """Ask for a file to pin; the session is opened and the file pinned to it."""
        chosen = self.selected()
        if chosen is not None and self._pin is not None:
            self._ask(chosen, "", f"File to pin to “{cut(chosen.title, 40)}”, enter pins, "
                                  "esc cancels", pinning=True)

    def _ask(self, chosen: SessionSummary, value: str, hint: str, *,
             pinning: bool = False) -> None:
        self._renaming, self._pinning = chosen, pinning
        box = self.query_one("#sessions-rename", Input)
        box.value, box.placeholder = value, hint
        box.display = True
        box.focus()

    @on(Input.Submitted, "#sessions-rename")
    def _rename_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        target, title, pinning = self._renaming, event.value.strip(), self._pinning
        self._end_rename()
        if pinning:
            if target is not None and title and self._pin is not None:
                self.dismiss(None)
                self._pin(target.id, title)
            return
        if target is None or not title or self._rename is None:
            return
        if self._call(self._rename, target.id, title):
            self.run_search(self.query_one("#sessions-search", Input).value)

    def _end_rename(self) -> None:
        self._renaming, self._pinning = None, False
        self.query_one("#sessions-rename", Input).placeholder = RENAME_HINT
        self.query_one("#sessions-rename").display = False
        self.query_one(SessionTable).focus()

    def action_delete(self) -> None:
        chosen = self.selected()
        if chosen is None or self._delete is None:
            return

        def answered(yes: bool | None) -> None:
            if yes and self._call(self._delete, chosen.id):
                self.run_search(self.query_one("#sessions-search", Input).value)

        self.app.push_screen(
            ConfirmScreen(f"Delete “{chosen.title}” and its cache? This cannot be undone.",
                          yes="Delete", destructive=True), answered)

    def _call(self, fn: Callable[..., object] | None, *args: object) -> bool:
        try:
            fn(*args)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - shown to the user, never a traceback
            self.notify(str(exc) or type(exc).__name__, severity="error")
            return False
        return True
