"""Pick a model; one not on disk can be downloaded (or imported) with progress."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, ProgressBar, Static

from mlxchat.chat import human_bytes
from mlxchat.units import fmt_int

if TYPE_CHECKING:
    from mlxchat.models import ModelEntry

ProgressCallback = Callable[[int, "int | None"], None]
"""``progress(done_bytes, total_bytes_or_None)``; safe to call from any thread."""
StartDownload = Callable[[str, ProgressCallback], object]
"""``start_download(alias, progress)`` blocks until done; it runs in a thread and
stops early (returning or raising) once the picker's cancel event is set."""


SOURCE_WIDTH = 40
"""A source longer than this (a deep path, a long repo id) shows its end."""


def short_source(source: str) -> str:
    return source if len(source) <= SOURCE_WIDTH else "…" + source[-(SOURCE_WIDTH - 1):]


class ModelPickerScreen(ModalScreen[str | None]):
    """Dismisses with the chosen alias, or None. Choosing a model that is not on
    disk starts ``start_download`` in a thread; escape cancels it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Close / cancel download", show=False)]

    def __init__(self, entries: Sequence[ModelEntry], *,
                 start_download: StartDownload | None = None,
                 cancel_event: threading.Event | None = None,
                 current: str | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.entries = list(entries)
        self._start_download = start_download
        self.cancel_event = cancel_event or threading.Event()
        """Set on cancel; give the same event to ``start_download`` when wiring it."""
        self.current = current
        self.downloading: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="models-dialog") as dialog:
            dialog.border_title = "Models"
            yield DataTable(id="models-table", cursor_type="row", zebra_stripes=True)
            with Vertical(id="models-download"):
                yield Static("", id="models-status", markup=False)
                yield ProgressBar(id="models-progress", show_eta=False)
            yield Static("enter choose (downloads if needed) · esc close or cancel download",
                         classes="dialog-hint")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("Model", "Bits", "Context", "Size", "Needs", "Fits", "Offline",
                          "Source")
        for entry in self.entries:
            mark = "● " if entry.alias == self.current else "  "
            fits = entry.fits
            table.add_row(
                Text(mark + entry.alias, style="bold"),
                Text(f"{entry.bits}" if entry.bits else "–"),
                Text(fmt_int(entry.context_window) if entry.context_window else "–"),
                Text(human_bytes(entry.size_bytes) if entry.size_bytes else "–"),
                Text(human_bytes(entry.needed_bytes) if entry.needed_bytes else "–"),
                Text(fits, style="green" if fits == "yes" else "red" if fits == "no"
                     else "yellow" if fits.startswith("up to") else "dim"),
                Text("yes", style="green") if entry.available_offline
                else Text("download", style="yellow"),
                Text(short_source(entry.source), style="dim"),
                key=entry.alias)
        self.query_one("#models-download").display = False
        table.focus()

    def _entry(self, alias: str) -> ModelEntry:
        return next(e for e in self.entries if e.alias == alias)

    @on(DataTable.RowSelected)
    def _choose(self, event: DataTable.RowSelected) -> None:
        event.stop()
        alias = str(event.row_key.value)
        self.choose(alias)

    def choose(self, alias: str) -> None:
        if self.downloading:
            return
        entry = self._entry(alias)
        if entry.available_offline:
            self.dismiss(alias)
        elif self._start_download is None:
            self._status(f"{alias} is not on disk and downloads are off.")
        else:
            self.download(alias)

    # -- download ----------------------------------------------------------------

    def _status(self, text: str) -> None:
        self.query_one("#models-download").display = True
        self.query_one("#models-status", Static).update(text)

    def download(self, alias: str) -> None:
        self.cancel_event.clear()
        self.downloading = alias
        self._status(f"Downloading {alias}…  esc cancels")
        bar = self.query_one(ProgressBar)
        bar.update(total=None, progress=0)
        self._download_worker(alias)

    def _progress(self, done: int, total: int | None) -> None:
        if not self.is_attached:
            return
        bar = self.query_one(ProgressBar)
        bar.update(total=total, progress=done)
        of = f" / {human_bytes(total)}" if total else ""
        self._status(f"Downloading {self.downloading}…  {human_bytes(done)}{of}  esc cancels")

    @work(thread=True, exclusive=True, group="model-download")
    def _download_worker(self, alias: str) -> None:
        app = self.app

        def report(fn: Callable[..., None], *args: object) -> None:
            try:
                app.call_from_thread(fn, *args)
            except RuntimeError:
                pass  # the app closed while downloading; nothing left to show

        def progress(done: int, total: int | None) -> None:
            report(self._progress, done, total)

        try:
            assert self._start_download is not None
            self._start_download(alias, progress)
        except Exception as exc:  # noqa: BLE001 - shown to the user, never a traceback
            report(self._download_ended, alias, str(exc) or type(exc).__name__)
            return
        report(self._download_ended, alias, None)

    def _download_ended(self, alias: str, error: str | None) -> None:
        self.downloading = None
        if not self.is_attached:
            return
        if self.cancel_event.is_set():
            self._status(f"Download of {alias} cancelled.")
        elif error is not None:
            self._status(f"Download of {alias} failed: {error}")
        else:
            self.dismiss(alias)

    def on_unmount(self) -> None:
        self.cancel_event.set()  # leaving the app stops a download in flight

    def action_cancel(self) -> None:
        if self.downloading:
            self.cancel_event.set()
            self._status(f"Cancelling {self.downloading}…")
        else:
            self.dismiss(None)
