"""Under the input, a marker says what /attach holds for the next message,
until the message takes it or /attach --clear drops it."""

from __future__ import annotations

from mlxchat.tui.formatting import pending_line

from .app_support import ready, send, tiny_app
from .test_app_layout import screen_lines


def marker(app) -> str | None:
    return app.prompt.area.border_subtitle


async def test_the_marker_shows_a_pending_attachment_until_it_is_sent_or_dropped(tmp_path, tiny):
    notes = tmp_path / "notes.txt"
    notes.write_text("Rivers run to the sea.\n" * 5)
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        assert marker(app) is None
        await send(pilot, f"/attach {notes}")
        [attached] = app.conversation.turns.attachments
        assert marker(app) == f"attached: notes.txt ({attached.tokens:,} tokens)"
        await pilot.pause()
        assert any(marker(app) in line for line in screen_lines(app))  # whole at 80 columns
        await send(pilot, "Summarize it")
        assert app.conversation.turns.attachments == [] and marker(app) is None
        await send(pilot, f"/attach {notes}")
        assert marker(app) is not None
        await send(pilot, "/attach --clear")
        assert marker(app) is None


def test_the_line_names_files_and_images_and_never_cuts_a_figure():
    assert pending_line([], []) is None
    assert pending_line([("GPL-3", 7652)], []) == "attached: GPL-3 (7,652 tokens)"
    assert (pending_line([("a.txt", 1), ("b.txt", 20_000)], ["x.png", "y.png"])
            == "attached: 2 files (20,001 tokens) · 2 images")
    long = pending_line([("a-very-long-file-name-that-goes-on-and-on.txt", 123_456)],
                        ["another-very-long-image-file-name.png"])
    assert "… (123,456 tokens) · another-very-long" in long and long.endswith("…")
    assert len(long) <= 72  # the input's border at 80 columns
