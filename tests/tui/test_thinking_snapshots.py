"""Snapshots of a reply's reasoning block, folded and unfolded (fixed text and figures)."""

from mlxchat.chat import Message
from mlxchat.tui.widgets import AssistantMessage, Transcript
from mlxchat.turn_stats import TurnStats

from .tui_hosts import HostApp

REASONING = ("The user wants the capital of France. Paris has been the capital since the "
             "tenth century; answer in one short sentence.")


def thinking_app() -> HostApp:
    return HostApp(lambda: [Transcript(assistant_label="qwen3-8b")])


async def show_reply(pilot, unfold: bool) -> None:
    transcript = pilot.app.query_one(Transcript)
    reply = Message("assistant", "The capital of France is **Paris**.", reasoning=REASONING,
                    stats=TurnStats(ttft_s=0.4, decode_tps=41.5, generated_tokens=38,
                                    reasoning_tokens=29, reasoning_s=0.71,
                                    prefilled_tokens=18, cache_source="warm"))
    await transcript.load([Message("user", "What is the capital of France?"), reply])
    if unfold:
        transcript.query(AssistantMessage).last().thinking.toggle()
    await pilot.pause()


def test_reasoning_folded(snap_compare):
    async def run_before(pilot):
        await show_reply(pilot, unfold=False)
    assert snap_compare(thinking_app(), terminal_size=(80, 16), run_before=run_before)


def test_reasoning_unfolded(snap_compare):
    async def run_before(pilot):
        await show_reply(pilot, unfold=True)
    assert snap_compare(thinking_app(), terminal_size=(80, 16), run_before=run_before)
