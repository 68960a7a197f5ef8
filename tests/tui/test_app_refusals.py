"""What is refused while a reply is generated comes back to the input, ready to
reuse and never glued to what is typed next."""

from __future__ import annotations

from .app_support import ready, settle, start_long_reply, tiny_app, tiny_settings, until


def type_keys(app, text: str) -> None:
    """Typing while the model decodes (Pilot's press waits for an idle CPU)."""
    for char in text:
        app.simulate_key("space" if char == " " else char)


async def test_refused_text_comes_back_selected_and_typing_replaces_it(tmp_path, tiny_long):
    app = tiny_app(tmp_path / "s.db", tiny_long, settings=tiny_settings(max_tokens=30000))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await start_long_reply(app)
        # A command that may not run during a reply, then a message.
        for refused, typed in (("/retry", "/edit"), ("And of Portugal?", "/help")):
            app.prompt.text = refused
            app.simulate_key("enter")
            # Back in the input, all selected (the key is handled asynchronously).
            await until(lambda: app.prompt.area.selected_text == refused, timeout=10)
            assert app.prompt.text == refused and app.generating
            type_keys(app, typed)
            await until(lambda: app.prompt.text == typed)
            app.prompt.clear()
        # Enter on the refused text, untouched, sends it as it was.
        app.prompt.text = "And of Portugal?"
        app.simulate_key("enter")
        await until(lambda: app.prompt.area.selected_text == "And of Portugal?")
        app.simulate_key("escape")
        await settle(pilot)
        assert not app.generating
        app.submit("/set max_tokens 8")  # the next reply runs to its end
        await settle(pilot)
        app.simulate_key("enter")
        await settle(pilot)
        assert app.conversation.messages[-2].content == "And of Portugal?"
