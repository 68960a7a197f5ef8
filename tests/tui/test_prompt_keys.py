"""Keys that arrive in one read of the terminal apply in the order they were typed.

A paste without bracketed paste, a script (tmux send-keys) or a slow SSH link
hands the app several keys at once: the terminal's bytes are parsed here as the
driver parses them and every key is queued before the app handles any.
"""

from textual._xterm_parser import XTermParser
from textual.app import App

from mlxchat.tui.widgets import PromptInput

from .tui_hosts import HostApp, fake_complete

BACKSPACE, CTRL_U, CTRL_W, ENTER = "\x7f", "\x15", "\x17", "\r"


def host() -> HostApp:
    return HostApp(lambda: PromptInput(fake_complete, cursor_blink=False))


def one_read(app: App, data: str) -> None:
    """Queue every key in ``data`` (terminal bytes) before the app handles one."""
    for event in XTermParser().feed(data):
        app.post_message(event)


async def sent(pilot, app: HostApp) -> str:
    """The text of the first message sent, once it was."""
    while not app.received:
        await pilot.pause()
    return app.received[0].text


async def test_an_editing_key_applies_before_the_characters_after_it():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press("x")
        one_read(app, f"{BACKSPACE}/get seed{ENTER}")
        assert await sent(pilot, app) == "/get seed"


async def test_a_line_cleared_in_the_same_read_keeps_the_command_typed_after_it():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        prompt.restore("an old message")  # all selected, as after a refusal
        # A long line comes in two reads: the second after the first was handled.
        one_read(app, f"{CTRL_U}/attach /usr/share/common-lic")
        await pilot.pause()
        one_read(app, f"enses/GPL-3{ENTER}")
        assert await sent(pilot, app) == "/attach /usr/share/common-licenses/GPL-3"


async def test_word_deletes_and_arrows_interleave_with_typing_in_order():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        left = "\x1b[D"
        one_read(app, f"hello wrld{CTRL_W}world{left}{left}{left}{BACKSPACE}!{ENTER}")
        assert await sent(pilot, app) == "hello w!rld"
