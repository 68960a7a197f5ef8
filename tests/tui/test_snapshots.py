"""Snapshot tests: fixed numbers, no cursor blink, a fixed clock."""

import asyncio

from mlxchat.chat import Message
from mlxchat.engine.events import PrefillProgress
from mlxchat.tui.screens import HelpScreen
from mlxchat.tui.widgets import GaugesPanel, PromptInput, Transcript

from .tui_hosts import (
    DEMO_MESSAGES,
    GB,
    SAMPLE_STATE,
    SAMPLE_STATS,
    HostApp,
    ScreenHost,
    fake_complete,
)

HELP_ROWS = [
    ("/help", "Show commands and keys"),
    ("/model <alias|repo|path>", "Switch model; the cache is kept per session"),
    ("/sessions", "Browse, search, rename and delete saved sessions"),
    ("/set <name> <value>", "Change a generation setting (temperature, max_tokens, kv_bits…)"),
    ("/retry", "Regenerate the last reply as a new branch"),
    ("/clear", "Start a new session"),
]
HELP_KEYS = [
    ("enter", "send"),
    ("ctrl+j / alt+enter", "newline"),
    ("↑ in an empty prompt", "edit the last message"),
    ("escape", "stop the reply"),
    ("ctrl+q", "quit"),
]


def demo_app() -> HostApp:
    return HostApp(lambda: [GaugesPanel(), Transcript(assistant_label="smollm2-135m"),
                            PromptInput(fake_complete, cursor_blink=False)])


async def fill_demo(pilot) -> None:
    app = pilot.app
    panel = app.query_one(GaugesPanel)
    panel.update_state(SAMPLE_STATE, 48 * GB)
    panel.update_stats(SAMPLE_STATS)
    transcript = app.query_one(Transcript)
    messages = [Message(role, text) for role, text in DEMO_MESSAGES]
    messages[1].stats = SAMPLE_STATS
    await transcript.load(messages)
    reply = await transcript.start_reply()
    await reply.append("Add a check before printing:\n\n```python\nif line.strip():\n")
    await reply.finish(None, cancelled=True)
    await transcript.add_notice("Could not load model 'qwen9': not in the catalog. "
                                "Try /models to list them.", "error")
    panel.decoding(42, 31.5)
    prompt = app.query_one(PromptInput)
    prompt.focus()
    await pilot.press("/", "m")
    await pilot.pause()


def test_gauges_sidebar(snap_compare):
    async def run_before(pilot):
        panel = pilot.app.query_one(GaugesPanel)
        panel.update_state(SAMPLE_STATE, 48 * GB)
        panel.update_stats(SAMPLE_STATS)
        panel.prefill(PrefillProgress(done=768, total=2048, tps=1500.25))

    assert snap_compare(HostApp(GaugesPanel), terminal_size=(120, 45), run_before=run_before)


def test_gauges_compact(snap_compare):
    async def run_before(pilot):
        panel = pilot.app.query_one(GaugesPanel)
        panel.update_state(SAMPLE_STATE, 48 * GB)
        panel.update_stats(SAMPLE_STATS)

    assert snap_compare(HostApp(GaugesPanel), terminal_size=(80, 24), run_before=run_before)


def test_help_screen(snap_compare):
    assert snap_compare(ScreenHost(lambda: HelpScreen([("Chat", HELP_ROWS[4:]),
                                                       ("Sessions", HELP_ROWS[:4])], HELP_KEYS)),
                        terminal_size=(100, 30))


def test_layout_wide(snap_compare):
    assert snap_compare(demo_app(), terminal_size=(200, 50), run_before=fill_demo)


def test_layout_narrow(snap_compare):
    assert snap_compare(demo_app(), terminal_size=(80, 24), run_before=fill_demo)


def test_sessions_screen(snap_compare):
    from mlxchat.tui.screens import SessionsScreen

    from .test_screens import NOW, FakeStore

    store = FakeStore()
    app = ScreenHost(lambda: SessionsScreen(search=store.search, rename=store.rename,
                                            delete=store.delete, now=lambda: NOW))

    async def run_before(pilot):
        await pilot.app.workers.wait_for_complete()
        pilot.app.screen.query_one("#sessions-search").cursor_blink = False
        await pilot.press("down", "down", "down")

    assert snap_compare(app, terminal_size=(100, 30), run_before=run_before)


def test_model_picker_downloading(snap_compare):
    import threading

    from mlxchat.tui.screens import ModelPickerScreen

    from .test_screens import ENTRIES

    cancel = threading.Event()
    reported = threading.Event()

    def download(alias, progress):
        progress(904_000_000, 2_260_000_000)
        reported.set()
        cancel.wait(10)  # set when the screen unmounts at the end of the test

    app = ScreenHost(lambda: ModelPickerScreen(ENTRIES, start_download=download,
                                               cancel_event=cancel, current="smollm2-135m"))

    async def run_before(pilot):
        await pilot.press("down", "enter")
        assert await asyncio.to_thread(reported.wait, 120)  # a state, bounded for a busy machine
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 24), run_before=run_before)
