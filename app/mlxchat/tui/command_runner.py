"""Slash commands inside the app: each runs off the UI thread (on the app's
MLX thread: /model loads a model), its CommandResult is rendered generically,
then its fields are acted on (a turn, a confirmation, a screen, quit, a
changed session, the input)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from mlxchat.commands import CommandResult
from mlxchat.commands.images import dropped_image
from mlxchat.tui.failures import error_text
from mlxchat.tui.formatting import pending_line
from mlxchat.tui.screens import ConfirmScreen
from mlxchat.tui.widgets.notices import MarkdownNotice, TableNotice
from mlxchat.tui.widgets.picture import image_view

SLOW_COMMAND_SECONDS = 0.3
"""A command still running after this long shows the activity line."""


def command_name(line: str) -> str:
    """'/model qwen3-4b' -> '/model'."""
    return line.strip().split(maxsplit=1)[0] if line.strip() else line


class CommandRunner:
    """One per app; ``run`` and ``start`` on the UI thread."""

    def __init__(self, app: Any):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""

    def dropped(self, text: str) -> bool:
        """``text`` is only the path of an image file (a file dropped on the terminal)."""
        ctx = self.app.ctx
        return ctx is not None and dropped_image(ctx, text) is not None

    def run(self, line: str, *, restore: str | None = None,
            restore_editing: bool = False) -> None:
        """Run ``line`` (a slash command, or a dropped image's path: ``/image
        --dropped``, which asks first) in a thread; ``restore`` goes back into
        the input if the command fails, so nothing typed is lost."""
        app = self.app
        assert app.ctx is not None
        if not line.lstrip().startswith("/") and self.dropped(line):
            line = f"/image --dropped {line.strip()}"
        self.start(command_name(line), partial(app.registry.run, line, app.ctx),
                   restore, restore_editing)

    def start(self, label: str, call: Callable[[], CommandResult],
              restore: str | None = None, restore_editing: bool = False) -> None:
        app = self.app
        app.running = label

        def slow() -> None:
            if app.running == label and not app.activity.active:
                app.activity.show(f"running {label}…")
        app.set_timer(SLOW_COMMAND_SECONDS, slow)
        app.run_worker(partial(self._work, call, restore, restore_editing), thread=True,
                       group="command", exit_on_error=False)

    def _work(self, call: Callable[[], CommandResult], restore: str | None,
              restore_editing: bool) -> None:
        app = self.app
        try:
            result = app.mlx.call(call)  # /model loads a model: MLX on the app's thread
            followed = app.mlx.call(self._follow_model)  # a server beside follows it
        except Exception as exc:  # noqa: BLE001 - run() never raises; this is a guard
            result, followed = CommandResult.error(error_text(exc)), None
        app._ui(self._apply, result, restore, restore_editing)
        if followed is not None:
            app._ui(app.transcript.add_notice, followed, "info")
        if result.turn is not None:
            app.turn_stream.stream(result.turn)

    def show_pending(self) -> None:
        """The marker under the input: what /attach and /image hold for the next
        message (after any command, and once a send took them)."""
        conv = self.app.conversation
        turns = conv.turns if conv is not None else None
        self.app.prompt.show_pending(None if turns is None else pending_line(
            [(a.path.name, a.tokens) for a in turns.attachments],
            [ref.name or "image" for ref in turns.images]))

    def progress(self, label: str, done: int | None, total: int | None) -> None:
        """From a command's thread: its progress on the activity line."""
        try:
            self.app._ui(self.app.activity.show, label, done, total)
        except RuntimeError:  # the app is closing: the command was told to stop
            pass

    def _follow_model(self) -> str | None:
        """From the command's thread: a server beside the chat serves the model
        the command left the chat on (/model, a session of another model)."""
        conv = self.app.conversation
        return None if conv is None else self.app.serving.follow(conv)

    async def _apply(self, result: CommandResult, restore: str | None,
                     restore_editing: bool) -> None:
        app = self.app
        app.running = None
        app.activity.hide()
        if result.turn is not None:
            app.generating = True
        if result.session_changed:
            await app.reload_session()
        await self.render(result)
        self.show_pending()
        prompt = app.prompt
        if result.kind == "error" and restore is not None and not prompt.text:
            prompt.restore(restore)
            app.editing = restore_editing
        if result.prefill_input is not None:
            prompt.text = result.prefill_input
        elif result.clear_input and restore is not None and prompt.text == restore:
            prompt.clear()
        if result.confirm is not None:
            self._ask(result)
        if result.open_screen is not None:
            app.screens.open(result.open_screen)
        if result.quit:
            await app.action_quit()
        elif result.turn is None:  # an /attach, a new history: prefill what is typed now
            app.typing.changed(prompt.text, at_once=True)

    async def render(self, result: CommandResult) -> None:
        """Show a result in the transcript: error/info as notices, Markdown, tables."""
        if result.kind == "confirm":
            return  # asked in a dialog
        if result.open_screen is not None and result.kind in ("info", "table"):
            return  # the screen shows the same content
        if result.turn is not None and result.kind == "info":
            self.app.notify(result.text)  # the transcript shows the turn itself
            return
        transcript = self.app.transcript
        if result.kind == "error":
            await transcript.add_notice(result.plain(), "error")
        elif result.kind == "markdown":
            await transcript.add_kept(partial(MarkdownNotice, result.text))
        elif result.kind == "table":
            await transcript.add_kept(partial(TableNotice, result.text, result.columns,
                                              result.rows))
        elif result.text:
            await transcript.add_notice(result.text, "info")
        if result.image is not None:  # /image: previewed as the message will show it
            await transcript.add_kept(partial(image_view, result.image, self.app))

    def _ask(self, result: CommandResult) -> None:
        confirm = result.confirm
        assert confirm is not None

        def answered(yes: bool | None) -> None:
            if yes:
                self.start("confirmed", confirm.accept)
        self.app.push_screen(ConfirmScreen(confirm.question, yes=confirm.yes,
                                           destructive=confirm.destructive), answered)
