from mlxchat.tui.widgets import CompletionList, PromptInput

from .tui_hosts import HostApp, fake_complete


def host() -> HostApp:
    return HostApp(lambda: PromptInput(fake_complete, cursor_blink=False))


async def test_enter_posts_submitted_and_clears():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press(*"hello", "ctrl+j", *"world")
        assert prompt.text == "hello\nworld"
        await pilot.press("enter")
        await pilot.pause()
        [message] = app.received
        assert isinstance(message, PromptInput.Submitted)
        assert message.text == "hello\nworld"
        assert prompt.text == ""


async def test_newline_keys_and_blank_enter_sends_nothing():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press("a", "alt+enter", "b", "shift+enter", "c")
        assert prompt.text == "a\nb\nc"
        prompt.clear()
        await pilot.press("space", "enter")
        await pilot.pause()
        assert app.received == []


async def test_up_on_empty_posts_edit_last_but_moves_cursor_otherwise():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press("up")
        await pilot.pause()
        assert [type(m) for m in app.received] == [PromptInput.EditLast]
        await pilot.press("x", "ctrl+j", "y", "up")
        await pilot.pause()
        assert len(app.received) == 1
        assert prompt.area.cursor_location[0] == 0


async def test_completions_appear_on_slash_and_filter_as_you_type():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press("/")
        await pilot.pause()
        option_list = app.query_one(CompletionList)
        assert option_list.display and option_list.region.height > 0
        assert [c.display for c in prompt.completions] == [
            "/help", "/model", "/models", "/new", "/sessions", "/set"]
        await pilot.press("m")
        assert [c.display for c in prompt.completions] == ["/model", "/models"]
        assert option_list.option_count == 2
        await pilot.press("o", "d", "e", "l", "tab")  # accept '/model '
        assert prompt.text == "/model "
        assert [c.display for c in prompt.completions] == ["qwen3-4b", "smollm2-135m", "llama-3.2-1b"]
        await pilot.press("s", "down", "enter")  # enter accepts the highlighted item
        assert prompt.text == "/model smollm2-135m"
        assert app.received == []
        await pilot.press("enter")  # nothing left to complete: enter sends
        await pilot.pause()
        assert app.received[0].text == "/model smollm2-135m"


async def test_escape_closes_until_text_changes_and_plain_text_has_none():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press("/", "s")
        assert prompt.completions
        await pilot.press("escape")
        assert prompt.completions == []
        assert not app.query_one(CompletionList).display
        await pilot.press("e")
        assert [c.display for c in prompt.completions] == ["/sessions", "/set"]
        prompt.text = "hello /set"
        await pilot.pause()
        assert prompt.completions == []




async def test_enter_sends_what_was_typed_even_when_typed_faster_than_the_list():
    """A pasted or fast-typed command must not be replaced by a stale completion."""
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press("/", "s")
        assert [c.display for c in prompt.completions] == ["/sessions", "/set"]
        # The rest arrives in one burst: enter is handled before the list catches up.
        prompt.area.insert("et max_tokens 12")
        assert prompt.process_key("enter")
        await pilot.pause()
        assert [m.text for m in app.received] == ["/set max_tokens 12"]


async def test_refused_text_put_back_shows_no_completions_until_edited():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.query_one(PromptInput)
        prompt.restore("/he")  # a refused command: the error must stay readable
        await pilot.pause()
        assert prompt.completions == [] and prompt.text == "/he"
        await pilot.press("right", "l")  # edited: the list is back
        await pilot.pause()
        assert [c.value for c in prompt.completions]
