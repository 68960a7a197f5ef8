"""The Sources panel: under a message that retrieved, before its prefill, with
each chunk's file:lines, relevance and tokens; citations naming file:line; the
same after a reopen; indexing progress on the activity line."""

from __future__ import annotations

from textual.widgets import Markdown, Static

from mlxchat.chat import Message
from mlxchat.sources import Source, with_sources
from mlxchat.tui.widgets import Transcript, UserMessage
from mlxchat.tui.widgets.sources import SourcesPanel

from .app_support import ready, send, settle, tiny_app
from .tui_hosts import HostApp

SETUP = Source(n=1, collection="notes", path="/srv/notes/setup.md", start_line=12, end_line=30,
               heading="Install > Linux", text="Run make.", tokens=180, score=0.0328)
FAQ = Source(n=2, collection="notes", path="/srv/notes/faq.md", start_line=3, end_line=9,
             text="No network is needed.", tokens=95, score=0.0161,
             stale="file changed since indexing")


def cited_messages() -> list[Message]:
    user = Message("user", with_sources("notes", [SETUP, FAQ], "How do I install it offline?"),
                   sources=[SETUP, FAQ])
    return [user, Message("assistant", "Run `make` [1]; no network is needed [2].")]


async def test_a_message_with_sources_shows_the_panel_and_cites(tmp_path):
    app = HostApp(lambda: Transcript())
    async with app.run_test(size=(120, 30)) as pilot:
        transcript = app.query_one(Transcript)
        await transcript.load(cited_messages())
        await pilot.pause()
        user = transcript.query_one(UserMessage)
        assert user.query_one(".message-body", Static).render().plain == \
            "How do I install it offline?"
        panel = user.query_one(SourcesPanel).render().plain
        # Relevance against the best of the list (0.0161 of 0.0328), not a bare score.
        assert panel.splitlines() == [
            "2 sources · 275 tokens from notes",
            "[1] /srv/notes/setup.md:12-30 · Install > Linux · best match · 180 tokens",
            "[2] /srv/notes/faq.md:3-9 · 49% of the best · 95 tokens · file changed since "
            "indexing"]
        reply = transcript.query_one(Markdown).source
        assert reply == "Run `make` [1 · setup.md:12]; no network is needed [2 · faq.md:3]."


async def test_the_header_says_in_words_what_did_not_fit():
    panel = SourcesPanel([SETUP, FAQ], left_out=5, budget=1024, forecast_s=2.5)
    app = HostApp(lambda: panel)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = " ".join(panel.render().plain.split())  # wrapped at 80 columns
        assert text.startswith("2 sources · 275 tokens from notes · 5 more sources matched "
                               "but did not fit the 1,024-token budget · ~2.50 s to prefill")


def test_sources_panel_snapshot(snap_compare):
    async def run_before(pilot):
        await pilot.app.query_one(Transcript).load(cited_messages())
        await pilot.pause()
    assert snap_compare(HostApp(lambda: Transcript()), terminal_size=(100, 16),
                        run_before=run_before)


async def test_the_app_indexes_retrieves_and_shows_sources_before_the_reply(tmp_path, tiny):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "boats.md").write_text("# Boats\n\nSailing boats need wind and a keel.\n")
    (notes / "trains.md").write_text("# Trains\n\nTrains run on rails.\n")
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        shown: list[str] = []
        real_show = app.activity.show

        def recording(label, done=None, total=None):
            shown.append(label)
            real_show(label, done, total)
        app.activity.show = recording
        await send(pilot, f"/docs add notes {notes}")
        assert any(line.startswith("indexing 2/2 files") for line in shown), shown
        assert app.conversation.session.settings.docs == "notes"
        panels_at_first_text: list[int] = []
        real_batch = app.turn_stream.show_batch

        async def first_batch(reply, batch):
            panels_at_first_text.append(len(app.transcript.query(SourcesPanel)))
            return await real_batch(reply, batch)
        app.turn_stream.show_batch = first_batch
        await send(pilot, "what do sailing boats need")
        assert panels_at_first_text and panels_at_first_text[0] == 1  # before any reply text
        panel = app.transcript.query_one(SourcesPanel)
        text = panel.render().plain
        # The unrelated note falls under the relevance floor and is not sent.
        assert text.startswith("1 source · ") and f"{notes}/boats.md:1-3 · Boats" in text
        assert "trains.md" not in text
        assert "retrieving from notes…" in shown
        sid = app.conversation.session.id
        # Reopened, the panel is there again, from the stored sources.
        await send(pilot, "/new")
        assert not app.transcript.query(SourcesPanel)
        await send(pilot, f"/open {sid}")
        await settle(pilot)
        again = app.transcript.query_one(SourcesPanel).render().plain
        assert again.splitlines()[1:] == text.splitlines()[1:]
