"""The app with a tiny vision-language model: /image shows the cost before
sending, the transcript shows a half-block thumbnail, a dropped path is
recognised and confirmed, a text-only model refuses in one line."""

from __future__ import annotations

from pathlib import Path

from mlxchat.chat import Message
from mlxchat.tui.screens import ConfirmScreen
from mlxchat.tui.widgets import NoticeMessage, Transcript, UserMessage
from mlxchat.tui.widgets.thumbnail import ImageThumbnail

from tests.tui.app_support import ready, send, settle, tiny_app
from tests.tui.tui_hosts import HostApp

from .conftest import make_image, ramp_image


def notices(app) -> list[str]:
    return [w.render().plain for w in app.transcript.query(NoticeMessage)]


async def test_image_command_then_send_shows_the_thumbnail(tmp_path, tiny_vl):
    shot = make_image(tmp_path / "shot.png", (100, 70), 5)
    app = tiny_app(tmp_path / "s.db", tiny_vl)
    async with app.run_test(size=(120, 50)) as pilot:
        await ready(pilot)
        await send(pilot, f"/image {shot.path}")
        said = notices(app)[-1]
        assert said.startswith("Image shot.png: 100x70, ") and " 8 tokens (" in said
        assert "goes with your next message" in said
        await send(pilot, "What is it?")
        conv = app.conversation
        assert [len(m.images) for m in conv.messages] == [1, 0]
        shown = app.transcript.query_one(UserMessage)
        thumb = shown.query_one(ImageThumbnail)
        assert thumb.drawn and thumb.ref.digest == shot.digest
        rendered = thumb.render().plain.splitlines()
        assert rendered[0] == "▀" * 24 and rendered[-1].startswith("▣ shot.png · 100x70")
        assert len(rendered) == 1 + 8  # 70/100 of 24 columns, two pixel rows a line


async def test_a_dropped_path_is_recognised_and_confirmed(tmp_path, tiny_vl):
    shot = make_image(tmp_path / "my shot.png", (60, 60), 6)
    app = tiny_app(tmp_path / "s.db", tiny_vl)
    async with app.run_test(size=(120, 50)) as pilot:
        await ready(pilot)
        app.prompt.text = "'" + shot.path + "' "  # as a terminal pastes a dropped file
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert [r.digest for r in app.conversation.turns.images] == [shot.digest]
        assert notices(app)[-1].startswith("Image my shot.png: 60x60")


async def test_a_text_model_refuses_the_image_in_one_line(tmp_path, tiny):
    shot = make_image(tmp_path / "shot.png", (50, 50), 7)
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 50)) as pilot:
        await ready(pilot)
        await send(pilot, f"/image {shot.path}")
        said = notices(app)[-1]
        assert "sees no images" in said and "\n" not in said
        assert app.conversation.turns.images == []
        assert not any(Path(app.conversation.store.db.path).parent.glob("images/*"))


def test_thumbnail_snapshot(snap_compare, tmp_path):
    ref = ramp_image(tmp_path)

    async def run_before(pilot):
        await pilot.app.query_one(Transcript).load(
            [Message("user", "What colours are these?", images=(ref,))])
        await pilot.pause()

    assert snap_compare(HostApp(lambda: Transcript()), terminal_size=(60, 20),
                        run_before=run_before)
