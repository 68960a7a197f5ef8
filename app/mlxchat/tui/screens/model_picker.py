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
from mlxchat.table_fit import fit_columns, shorten_start
from mlxchat.units import fmt_int

if TYPE_CHECKING:
    from mlxchat.models import ModelEntry

ProgressCallback = Callable[[int, "int | None"], None]
"""``progress(done_bytes, total_bytes_or_None)``; safe to call from any thread."""
StartDownload = Callable[[str, ProgressCallback], object]
"""``start_download(alias, progress)`` blocks until done; it runs in a thread and
stops early (returning or raising) once the picker's cancel event is set."""


SOURCE_MIN = 16
"""Narrower than this a source says too little: the column goes (the line
under the table shows the highlighted model's source whole)."""
DIALOG_MAX_WIDTH, DIALOG_FRAME, SCROLLBAR, CELL_PADDING = 150, 4, 2, 2
"""The stylesheet's #models-dialog: 90% wide up to 150, a border and 1 cell
of padding a side; the table's scrollbar; a cell's padding, both sides."""
TABLE_MAX_HEIGHT, BESIDE_TABLE = 20, 9
"""The table's rows at most; the dialog's rows around it (border, the line
under the table, the hint, their margins)."""
COLUMNS = ("Model", "Bits", "Context", "Size", "Needs", "Fits", "Offline", "Source")
PRIORITY = ("Model", "Fits", "Context", "Offline", "Source", "Size", "Needs", "Bits")
"""Which columns stay when the terminal is narrow, most wanted first."""


def short_source(source: str, width: int) -> str:
    """A source longer than ``width`` (a deep path, a long repo id) shows its end."""
    return shorten_start(source, width)


def fits_cell(fits: str) -> str:
    """'up to 89,104 tokens' as 'up to 89,104' (the column says what fits)."""
    return fits.removesuffix(" tokens")


def _cells(entry: ModelEntry, current: str | None) -> dict[str, Text]:
    mark = "● " if entry.alias == current else "  "
    fits = entry.fits
    return {
        "Model": Text(mark + entry.alias, style="bold"),
        "Bits": Text(f"{entry.bits}" if entry.bits else "–"),
        "Context": Text(fmt_int(entry.context_window) if entry.context_window else "–"),
        "Size": Text(human_bytes(entry.size_bytes) if entry.size_bytes else "–"),
        "Needs": Text(human_bytes(entry.needed_bytes) if entry.needed_bytes else "–"),
        "Fits": Text(fits_cell(fits), style="green" if fits == "yes" else "red" if fits == "no"
                     else "yellow" if fits.startswith("up to") else "dim"),
        "Offline": (Text("yes", style="green") if entry.available_offline
                    else Text("download", style="yellow")),
        "Source": Text(entry.source, style="dim"),
    }


def column_widths(rows: Sequence[dict[str, Text]], room: int) -> dict[str, int]:
    """The columns shown in ``room`` cells and each one's width: every figure
    whole, the least wanted columns left out first; the source shortened from
    its start (to SOURCE_MIN at least) before it goes."""
    natural = {c: max([len(c), *(r[c].cell_len for r in rows)]) for c in COLUMNS}
    return fit_columns(natural, PRIORITY, room, padding=CELL_PADDING, shrinks="Source",
                       shrink_min=SOURCE_MIN)


def detail_line(entry: ModelEntry, width: int) -> str:
    """The highlighted model whole, whatever the table had to leave out; lines
    break between its parts, never inside a figure."""
    parts = [f"{entry.alias}: {entry.source}",
             f"{entry.bits}-bit" if entry.bits else "unquantized or unknown bits",
             human_bytes(entry.size_bytes) if entry.size_bytes else "size unknown",
             (f"{fmt_int(entry.context_window)}-token window" if entry.context_window
              else "window unknown")]
    if entry.needed_bytes:
        parts.append(f"needs {human_bytes(entry.needed_bytes)} with its whole window")
    parts.append({"yes": "fits this machine", "no": "does not fit this machine",
                  "?": "fit unknown"}.get(entry.fits, f"fits {entry.fits}"))
    parts.append("on disk" if entry.available_offline else "needs a download")
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += f" · {part}"
        else:
            lines.append(part)
    return "\n".join(lines)


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
        self.widths: dict[str, int] = {}
        """The columns shown and their widths (``column_widths``)."""
        self.room = DIALOG_MAX_WIDTH - DIALOG_FRAME
        """The dialog's inner width, which the line under the table keeps to."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="models-dialog") as dialog:
            dialog.border_title = "Models"
            yield DataTable(id="models-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="models-detail", markup=False)
            with Vertical(id="models-download"):
                yield Static("", id="models-status", markup=False)
                yield ProgressBar(id="models-progress", show_eta=False)
            yield Static("enter choose (downloads if needed) · esc close or cancel download",
                         classes="dialog-hint")

    def on_mount(self) -> None:
        self._fill()
        self.query_one("#models-download").display = False
        table = self.query_one(DataTable)
        aliases = [e.alias for e in self.entries]
        if self.current in aliases:  # opens on the loaded model: enter keeps it
            table.move_cursor(row=aliases.index(self.current), animate=False)
        table.focus()

    def on_resize(self) -> None:
        self._fill()

    def _fill(self) -> None:
        """The table for this width: figures whole, columns left out when narrow."""
        table = self.query_one(DataTable)
        # Short terminals keep the line under the table and the hint in view.
        table.styles.max_height = max(4, min(TABLE_MAX_HEIGHT,
                                             self.app.size.height * 9 // 10 - BESIDE_TABLE))
        rows = [_cells(e, self.current) for e in self.entries]
        room = min(self.app.size.width * 9 // 10, DIALOG_MAX_WIDTH) - DIALOG_FRAME - SCROLLBAR
        self.room = room + SCROLLBAR
        widths = column_widths(rows, room)
        if widths != self.widths:
            self.widths = widths
            self._rebuild(table, rows)
        self._detail()

    def _rebuild(self, table: DataTable, rows: list[dict[str, Text]]) -> None:
        row = table.cursor_row
        table.clear(columns=True)
        for column, width in self.widths.items():
            table.add_column(column, width=width, key=column)
        for entry, cells in zip(self.entries, rows, strict=True):
            if "Source" in self.widths:
                cells["Source"] = Text(short_source(entry.source, self.widths["Source"]),
                                       style="dim")
            table.add_row(*(cells[c] for c in self.widths), key=entry.alias)
        if self.entries:
            table.move_cursor(row=min(row, len(self.entries) - 1), animate=False)

    @on(DataTable.RowHighlighted)
    def _show_detail(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._detail()

    def _detail(self) -> None:
        row = self.query_one(DataTable).cursor_row
        if self.entries and row is not None:
            entry = self.entries[min(row, len(self.entries) - 1)]
            self.query_one("#models-detail", Static).update(detail_line(entry, self.room))

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

    def _status(self, text: str, *, progress: bool = False) -> None:
        """The line under the table; with the bar only while a download runs
        (an idle one animates as if something still went on)."""
        self.query_one("#models-download").display = True
        self.query_one("#models-status", Static).update(text)
        self.query_one(ProgressBar).display = progress

    def download(self, alias: str) -> None:
        self.cancel_event.clear()
        self.downloading = alias
        self._status(f"Downloading {alias}…  esc cancels", progress=True)
        bar = self.query_one(ProgressBar)
        bar.update(total=None, progress=0)
        self._download_worker(alias)

    def _progress(self, done: int, total: int | None) -> None:
        if not self.is_attached:
            return
        bar = self.query_one(ProgressBar)
        bar.update(total=total, progress=done)
        of = f" / {human_bytes(total)}" if total else ""
        self._status(f"Downloading {self.downloading}…  {human_bytes(done)}{of}  esc cancels",
                     progress=True)

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
            self._status(f"Cancelling {self.downloading}…", progress=True)
        else:
            self.dismiss(None)
