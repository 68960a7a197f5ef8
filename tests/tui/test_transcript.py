import io
import itertools

import pytest

from rich.console import Console
from textual.widgets import Static

from mlxchat.chat import Message
from mlxchat.tui.formatting import transcript_stats_line
from mlxchat.tui.widgets import AssistantMessage, NoticeMessage, Transcript, UserMessage
from mlxchat.turn_stats import TurnStats

from .tui_hosts import HostApp


def host() -> HostApp:
    return HostApp(lambda: Transcript(assistant_label="smollm2"))


def footer_text(message: AssistantMessage) -> str:
    return str(message.query_one(".message-footer", Static).render())


async def test_streaming_appends_fragments_and_finish_shows_stats():
    app = host()
    async with app.run_test(size=(100, 30)) as pilot:
        transcript = app.query_one(Transcript)
        await transcript.add_user("Write *code*")
        reply = await transcript.start_reply()
        for fragment in ["Here:\n\n", "```python\n", "print(1)\n", "```\n"]:
            await reply.append(fragment)
        stats = TurnStats(ttft_s=0.12, decode_tps=30.0, generated_tokens=9, reused_tokens=10,
                          prefilled_tokens=4, cache_source="warm")
        await reply.finish(stats)
        await pilot.pause()
        message = transcript.query_one(AssistantMessage)
        assert reply.text == "Here:\n\n```python\nprint(1)\n```\n"
        assert message.markdown.source == reply.text
        assert message.query_one(".message-label", Static).render().plain == "smollm2"
        assert footer_text(message) == transcript_stats_line(stats)
        assert "(stopped)" not in footer_text(message)
        user = transcript.query_one(UserMessage)
        assert user.query_one(".message-body", Static).render().plain == "Write *code*"


async def test_cancelled_reply_keeps_partial_text_and_marks_stopped():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        transcript = app.query_one(Transcript)
        reply = await transcript.start_reply()
        await reply.append("The answer is")
        await reply.append(" forty")
        await reply.finish(None, cancelled=True)
        await pilot.pause()
        message = transcript.query_one(AssistantMessage)
        assert message.markdown.source == "The answer is forty"
        assert message.text == "The answer is forty"
        assert footer_text(message) == "(stopped)"
        assert message.query_one(".message-footer").display


@pytest.mark.parametrize(("finish", "window_full", "ends"), [
    ("stop", False, "ended by the model"),
    ("length", False, "stopped by max_tokens"),
    ("length", True, "stopped by the context window (full)"),
])
async def test_the_line_under_a_reply_says_how_it_ended(finish, window_full, ends):
    stats = TurnStats(ttft_s=0.12, decode_tps=30.0, generated_tokens=9, cache_source="warm",
                      finish_reason=finish, window_full=window_full)
    app = host()
    async with app.run_test(size=(160, 24)) as pilot:
        transcript = app.query_one(Transcript)
        await transcript.load([Message("user", "hi"), Message("assistant", "Hello", stats=stats)])
        await pilot.pause()
        footer = footer_text(transcript.query_one(AssistantMessage))
        assert footer.endswith(f" · {ends}") and footer.count(ends) == 1


async def test_a_stopped_reply_says_it_once_and_an_error_says_error():
    stopped = TurnStats(ttft_s=0.12, decode_tps=30.0, generated_tokens=9,
                        finish_reason="cancelled")
    app = host()
    async with app.run_test(size=(160, 24)) as pilot:
        transcript = app.query_one(Transcript)
        await transcript.load([Message("user", "hi"),
                               Message("assistant", "Hel", stats=stopped, cancelled=True)])
        reply = await transcript.start_reply()
        await reply.append("The answer is")
        await reply.finish(None, failed=True)  # the engine failed mid-reply
        await pilot.pause()
        first, second = transcript.query(AssistantMessage)
        assert footer_text(first).startswith("(stopped)") and "stopped by" not in footer_text(first)
        assert footer_text(second) == "(cut short by an error)"


async def test_load_renders_branch_and_notices_have_levels():
    stats = TurnStats(ttft_s=0.5, decode_tps=12.0, generated_tokens=3, cache_source="cold")
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        transcript = app.query_one(Transcript)
        await transcript.load([
            Message("system", "Be brief."),
            Message("user", "hi [b]there[/b]"),
            Message("assistant", "Hello!", stats=stats),
            Message("user", "and?"),
            Message("assistant", "Well", cancelled=True),
        ])
        await transcript.add_notice("Saved.")
        await transcript.add_notice(ValueError("no such model 'x'; try /models"), "error")
        await pilot.pause()
        kinds = [type(w).__name__ for w in transcript.children]
        assert kinds == ["SystemMessage", "UserMessage", "AssistantMessage", "UserMessage",
                         "AssistantMessage", "NoticeMessage", "NoticeMessage"]
        # user text is shown verbatim, not as markup
        assert transcript.query(UserMessage)[0].query_one(
            ".message-body", Static).render().plain == "hi [b]there[/b]"
        first, second = transcript.query(AssistantMessage)
        assert footer_text(first) == transcript_stats_line(stats)
        assert footer_text(second) == "(stopped)"
        info, error = transcript.query(NoticeMessage)
        assert info.has_class("-info") and error.has_class("-error")
        assert error.render().plain == "no such model 'x'; try /models"
        await transcript.clear()
        assert not transcript.children


async def test_follows_the_stream_unless_scrolled_up():
    app = host()
    async with app.run_test(size=(80, 20)) as pilot:
        transcript = app.query_one(Transcript)
        for i in range(12):
            await transcript.add_user(f"message {i}")
        reply = await transcript.start_reply()
        await reply.append("line\n\n" * 10)
        await pilot.pause()
        assert transcript.max_scroll_y > 0
        assert transcript.scroll_y == transcript.max_scroll_y

        transcript.scroll_to(y=0, animate=False)  # the user scrolls up
        await pilot.pause()
        await reply.append("more\n\n" * 10)
        await pilot.pause()
        assert transcript.scroll_y == 0

        await reply.finish(None)
        await transcript.add_user("next")  # sending brings the view back down
        await pilot.pause()
        assert transcript.scroll_y == transcript.max_scroll_y


async def test_reasoning_streams_into_a_folded_block_above_the_answer():
    app = host()
    async with app.run_test(size=(100, 30)) as pilot:
        transcript = app.query_one(Transcript)
        reply = await transcript.start_reply()
        message = transcript.query_one(AssistantMessage)
        assert not message.thinking.display  # no reasoning: no block
        await reply.append("Weigh the options.", "reasoning")
        await pilot.pause()
        block = message.thinking
        assert block.display and block.render().plain == "▸ Thinking…"
        await reply.append("Take the second.")
        stats = TurnStats(generated_tokens=12, reasoning_tokens=7, reasoning_s=1.5)
        await reply.finish(stats)
        await pilot.pause()
        assert message.markdown.source == reply.text == "Take the second."
        assert message.reasoning == "Weigh the options."
        folded = block.render().plain
        assert "Weigh" not in folded and "7 tokens" in folded and "Thought" in folded
        await pilot.click(block)
        await pilot.pause()
        assert block.render().plain.endswith("\nWeigh the options.")
        await pilot.click(block)
        await pilot.pause()
        assert block.render().plain == folded
        assert "7 thinking, 5 answer" in footer_text(message)


async def test_a_stored_reply_shows_its_reasoning_folded():
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        transcript = app.query_one(Transcript)
        await transcript.load([Message("user", "Hi"),
                               Message("assistant", "Hello.", reasoning="They greet me.",
                                       stats=TurnStats(generated_tokens=9, reasoning_tokens=4)),
                               Message("assistant", "No thought.")])
        await pilot.pause()
        first, second = transcript.query(AssistantMessage)
        assert first.thinking.display and "They greet" not in first.thinking.render().plain
        first.thinking.toggle()
        assert "They greet me." in first.thinking.render().plain
        assert not second.thinking.display


LONG_REPLY = """# Keeping a lighthouse

The keeper climbs the *spiral stair* at dusk, trims the wick and winds the clock
that turns the lens. Ships read the **flash pattern** from miles away.

- check the oil
- polish the lens
  - every prism, both sides
- log the weather

1. light the lamp
2. start the clockwork

```python
def flashes(period: float) -> int:
    return int(60 / period)
```

> A light that stops turning is a light no one trusts.

| hour | wind | visibility |
|------|------|------------|
| 20:00 | NW 4 | good |
| 02:00 | N 6 | poor |

The night ends at dawn: the keeper draws the curtains so the sun cannot
scorch the lens, and writes the last line of the log.
"""


def screen_text(app) -> tuple[str, str]:
    """The whole screen as a terminal would show it: (with styles, plain)."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(),
                      force_terminal=True, color_system="truecolor", record=True)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text(styles=True, clear=False), console.export_text()


async def settled_screen(app, pilot, rounds: int = 50) -> tuple[str, str]:
    """The screen once layout has settled: the same on two pauses in a row
    (on a loaded machine one pause can land before the last relayout)."""
    await pilot.pause()
    shown = screen_text(app)
    for _ in range(rounds):
        await pilot.pause(0.02)
        again = screen_text(app)
        if again == shown:
            return shown
        shown = again
    return shown


async def test_a_streamed_reply_renders_as_the_same_text_rendered_at_once():
    streamed, at_once = host(), host()
    async with streamed.run_test(size=(90, 70)) as pilot:
        transcript = streamed.query_one(Transcript)
        reply = await transcript.start_reply()
        # Uneven pieces: splits land inside words, fence markers, list items and table rows.
        start, sizes = 0, itertools.cycle([1, 7, 3, 13, 2, 29, 5, 11])
        while start < len(LONG_REPLY):
            end = start + next(sizes)
            await reply.append(LONG_REPLY[start:end])
            start = end
        await reply.finish(None)
        shown_streamed = await settled_screen(streamed, pilot)
        blocks = len(transcript.query_one(AssistantMessage).markdown.children)
    async with at_once.run_test(size=(90, 70)) as pilot:
        await at_once.query_one(Transcript).load([Message("assistant", LONG_REPLY)])
        shown_at_once = await settled_screen(at_once, pilot)
    assert blocks >= 7  # heading, paragraphs, lists, fence, quote, table
    assert "def flashes(period: float) -> int:" in shown_at_once[1]
    assert "writes the last line of the log." in shown_at_once[1]
    assert shown_streamed == shown_at_once


async def test_a_streamed_update_costs_one_layout_pass():
    # Each pass lays out and redraws the whole screen: ~10 ms of Python that
    # the model's own loop waits for at 250 tok/s.
    app = host()
    async with app.run_test(size=(80, 24)) as pilot:
        reply = await app.query_one(Transcript).start_reply()
        await reply.append("The keeper climbs the stair. ")
        await pilot.pause(0.2)
        passes = []
        refresh_layout = app.screen._refresh_layout

        def counted(*args, **kwargs):
            passes.append(args)
            return refresh_layout(*args, **kwargs)
        app.screen._refresh_layout = counted
        for _ in range(3):  # each batch grows the paragraph by a line or two
            await reply.append("She trims the wick and winds the clock. " * 3)
            await pilot.pause(0.2)
        assert len(passes) == 3


async def test_a_tool_loop_shows_its_calls_and_its_results_under_the_tools_name():
    from mlxchat.chat import CalledTool
    from mlxchat.tui.widgets.transcript import ToolResultMessage

    call = CalledTool("get_weather", {"city": "Paris"}, "call_1")
    app = host()
    async with app.run_test(size=(100, 30)) as pilot:
        transcript = app.query_one(Transcript)
        await transcript.load([
            Message("user", "Weather?"), Message("assistant", "Checking.", tool_calls=(call,)),
            Message("tool", "clear\nwindy", tool_call_id="call_1", tool_name="get_weather")])
        await pilot.pause()
        result = transcript.query_one(ToolResultMessage)
        assert result.block.render().plain == "▸ tool result · get_weather · 11 B"  # folded
        await pilot.click(result.block)
        assert result.block.render().plain == \
            "▾ tool result · get_weather · 11 B\n> clear\n> windy"
        reply = transcript.query_one(AssistantMessage)
        assert reply.text == 'Checking.\n\n→ get_weather({"city": "Paris"})'


async def test_an_attached_file_is_folded_to_one_line_and_unfolds_on_click():
    from mlxchat.chat import attachment_block
    from mlxchat.tui.widgets.folded import AttachmentBlock

    big = "\n".join(f"line {i}: " + "x" * 60 for i in range(200))  # ~14 KB
    content = attachment_block("notes.md", big) + "\n\nWhat is in it?"
    app = HostApp(lambda: Transcript(id="transcript"))
    async with app.run_test(size=(100, 40)) as pilot:
        transcript = app.query_one(Transcript)
        await transcript.add_user(content)
        await pilot.pause()
        block = transcript.query_one(AttachmentBlock)
        assert block.size.height == 1
        assert str(block.render()).startswith("▸ attached notes.md · 14.")
        body = transcript.query_one(UserMessage).query(".message-body").first()
        assert str(body.render()) == "What is in it?"
        await pilot.click(AttachmentBlock)
        await pilot.pause()
        assert block.expanded and block.size.height > 100
