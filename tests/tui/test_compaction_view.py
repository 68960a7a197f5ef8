"""A compaction on screen: one folded block where the conversation was
compacted ('N messages summarized in T tokens'), unfolded by a click or
ctrl+t; the Context gauge with the threshold and the compaction's state;
/context with the summary and the kept messages on their own rows."""

from __future__ import annotations

from textual.widgets import Static

from mlxchat.chat import Compaction, Message
from mlxchat.tui.widgets import Transcript, UserMessage
from mlxchat.tui.widgets.folded import SummaryBlock, SummaryMessage
from mlxchat.tui.widgets.notices import TableNotice

from .app_support import ready, send, tiny_app, tiny_settings, until
from .tui_hosts import HostApp

RECORD = Compaction(kept=2, summarized=42, summary_tokens=380, trigger="auto",
                    tokens_before=6_100, tokens_after=1_900)


async def test_the_block_is_folded_and_unfolds_on_a_click_or_ctrl_t():
    app = HostApp(lambda: Transcript(assistant_label="tiny"))
    async with app.run_test(size=(120, 30)) as pilot:
        transcript = app.query_one(Transcript)
        await transcript.load([
            Message("user", "One?"), Message("assistant", "1."),
            Message("summary", "They counted to one.", compaction=RECORD),
            Message("user", "Two?"), Message("assistant", "2.")])
        await pilot.pause()
        block = transcript.query_one(SummaryBlock)
        assert block.render().plain == ("▸ 42 messages summarized in 380 tokens · 6,100 → "
                                        "1,900 tokens in the window · click to unfold")
        assert block.size.height == 1
        await pilot.click(block)
        lines = block.render().plain.splitlines()
        assert lines[1].startswith("Compacted when the window filled: the model sees this")
        assert lines[2:] == ["> They counted to one."]
        assert transcript.toggle_last_fold()  # ctrl+t: the last folded thing is the summary
        assert block.render().plain.startswith("▸ 42 messages")


def _plain(app, selector: str) -> str:
    return app.gauges.query_one(selector, Static).render().plain


async def test_the_app_shows_the_switch_the_gauge_and_context_rows(tmp_path, tiny):
    settings = tiny_settings()
    settings.generation.context_window, settings.generation.compact_at = 768, 50
    app = tiny_app(tmp_path / "s.db", tiny, settings=settings)
    async with app.run_test(size=(200, 50)) as pilot:
        await ready(pilot)
        conv = app.conversation
        assert "│ compacts past 384" in _plain(app, "#context-text")
        i = 0
        while not any(isinstance(w, SummaryMessage) for w in app.transcript.children):
            await send(pilot, f"Question {i}: tell me about topic {i * 7}.")
            await until(lambda: conv.compactor.status().state != "preparing")
            app.refresh_gauges()
            if conv.compactor.status().state == "ready":
                assert "compacts past 384 · ready (a " in _plain(app, "#context-text")
            i += 1
            assert i < 40
        children = list(app.transcript.children)
        at = next(k for k, w in enumerate(children) if isinstance(w, SummaryMessage))
        assert isinstance(children[at + 1], UserMessage)  # right before the message it made room for
        assert children[at].query_one(SummaryBlock).render().plain.startswith("▸ ")
        await send(pilot, "/context")
        table = app.transcript.children[-1]
        assert isinstance(table, TableNotice) and "compacted: " in table.caption
        roles = [row[1] for row in table.rows]
        first = roles.index("summary")
        assert roles[first + 1] == "user" and int(table.rows[first][3]) > 0
        branch = conv.messages
        summary = next(k for k, m in enumerate(branch) if m.role == "summary")
        kept = [m for m in branch[summary - branch[summary].compaction.kept:]
                if m.role != "summary"]
        assert roles[first + 1:first + 1 + len(kept)] == [m.role for m in kept]
