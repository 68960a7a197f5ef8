"""Slash commands inside the app: run them off the UI thread, render any
CommandResult generically, then act on its fields (turn, confirm, screens,
quit, session changes, input). Also the command-palette provider.

A mixin of ``MlxChatApp``; ``_Host`` lists what it uses of the app.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from textual import work
from textual.command import DiscoveryHit, Hit, Hits, Provider

from mlxchat.commands import CommandResult
from mlxchat.commands.base import catalog_models
from mlxchat.commands.pins import pin_files
from mlxchat.errors import user_message
from mlxchat.tui.screens import (
    ConfirmScreen,
    HelpScreen,
    ModelPickerScreen,
    SessionsScreen,
)
from mlxchat.tui.widgets.notices import MarkdownNotice, TableNotice

if TYPE_CHECKING:
    from collections.abc import Iterator

    from textual.app import App

    from mlxchat.commands import CommandContext, Registry
    from mlxchat.engine.events import Event
    from mlxchat.models import ModelEntry
    from mlxchat.session.conversation import Conversation
    from mlxchat.session.mlx_thread import MlxThread
    from mlxchat.tui.serving import Serving
    from mlxchat.tui.typing_prefill import TypingPrefill
    from mlxchat.tui.widgets import PromptInput, Transcript
    from mlxchat.tui.widgets.activity import ActivityBar

    class _Host(App[int]):
        """What the mixin needs from MlxChatApp (for the type checker only)."""

        conversation: Conversation | None
        ctx: CommandContext | None
        registry: Registry
        running: str | None
        generating: bool
        editing: bool
        typing: TypingPrefill
        mlx: MlxThread
        serving: Serving
        _now: Callable[[], float]

        @property
        def transcript(self) -> Transcript: ...
        @property
        def prompt(self) -> PromptInput: ...
        @property
        def activity(self) -> ActivityBar: ...
        def _ui(self, fn: Callable[..., Any], *args: Any) -> Any: ...
        def _stream_turn(self, events: Iterator[Event]) -> None: ...
        async def reload_session(self) -> None: ...
        def submit(self, text: str) -> None: ...
else:
    _Host = object

log = logging.getLogger(__name__)

SLOW_COMMAND_SECONDS = 0.3
"""A command still running after this long shows the activity line."""

KEY_HELP = [
    ("enter", "send the message, or run the /command"),
    ("ctrl+j / alt+enter", "new line in the message"),
    ("tab / ↑ ↓", "accept / move in the completion list"),
    ("↑ in an empty prompt", "edit your last message (answered on a new branch)"),
    ("escape / ctrl+c", "stop the reply; the text so far is kept"),
    ("ctrl+n", "new session"),
    ("ctrl+o", "browse, search, rename and delete sessions"),
    ("ctrl+y", "copy the last reply (OSC 52)"),
    ("ctrl+t", "fold or unfold the last reply's thinking"),
    ("ctrl+p", "command palette: commands and themes"),
    ("f1", "this help"),
    ("ctrl+q", "quit; the session and its KV cache are saved"),
]


def error_text(exc: BaseException) -> str:
    """One line for the user; a bug is logged with its traceback, never shown."""
    text = user_message(exc)
    if text is None:
        log.error("unexpected error", exc_info=exc)
        text = f"Unexpected error: {type(exc).__name__}: {exc}. Details are in the log."
    return text


def command_name(line: str) -> str:
    """'/model qwen3-4b' -> '/model'."""
    return line.strip().split(maxsplit=1)[0] if line.strip() else line


class CommandsMixin(_Host):
    """Running commands and acting on their results (see the module docstring)."""

    def run_command(self, line: str, *, restore: str | None = None,
                    restore_editing: bool = False) -> None:
        """Run ``line`` (a slash command) in a thread; ``restore`` goes back into the
        input if the command fails, so nothing typed is lost."""
        assert self.ctx is not None
        self._start_command(command_name(line), partial(self.registry.run, line, self.ctx),
                            restore, restore_editing)

    def _start_command(self, label: str, call: Callable[[], CommandResult],
                       restore: str | None = None, restore_editing: bool = False) -> None:
        self.running = label

        def slow() -> None:
            if self.running == label and not self.activity.active:
                self.activity.show(f"running {label}…")
        self.set_timer(SLOW_COMMAND_SECONDS, slow)
        self._command_worker(call, restore, restore_editing)

    @work(thread=True, group="command", exit_on_error=False)
    def _command_worker(self, call: Callable[[], CommandResult],
                        restore: str | None, restore_editing: bool) -> None:
        try:
            result = self.mlx.call(call)  # /model loads a model: MLX on the app's thread
            followed = self.mlx.call(self._follow_model)  # a server beside follows it
        except Exception as exc:  # noqa: BLE001 - run() never raises; this is a guard
            result, followed = CommandResult.error(error_text(exc)), None
        self._ui(self._apply_result, result, restore, restore_editing)
        if followed is not None:
            self._ui(self.transcript.add_notice, followed, "info")
        if result.turn is not None:
            self._stream_turn(result.turn)

    async def _apply_result(self, result: CommandResult, restore: str | None,
                            restore_editing: bool) -> None:
        self.running = None
        self.activity.hide()
        if result.turn is not None:
            self.generating = True
        if result.session_changed:
            await self.reload_session()
        await self.render_result(result)
        prompt = self.prompt
        if result.kind == "error" and restore is not None and not prompt.text:
            prompt.restore(restore)
            self.editing = restore_editing
        if result.prefill_input is not None:
            prompt.text = result.prefill_input
        elif result.clear_input and restore is not None and prompt.text == restore:
            prompt.clear()
        if result.confirm is not None:
            self._ask(result)
        if result.open_screen is not None:
            self.open_screen(result.open_screen)
        if result.quit:
            await self.action_quit()
        elif result.turn is None:  # an /attach, a new history: prefill what is typed now
            self.typing.changed(prompt.text, at_once=True)

    async def render_result(self, result: CommandResult) -> None:
        """Show a result in the transcript: error/info as notices, Markdown, tables."""
        if result.kind == "confirm":
            return  # asked in a dialog
        if result.open_screen is not None and result.kind in ("info", "table"):
            return  # the screen shows the same content
        if result.turn is not None and result.kind == "info":
            self.notify(result.text)  # the transcript shows the turn itself
            return
        transcript = self.transcript
        if result.kind == "error":
            await transcript.add_notice(result.text, "error")
        elif result.kind == "markdown":
            await self._mount_notice(MarkdownNotice(result.text))
        elif result.kind == "table":
            await self._mount_notice(TableNotice(result.text, result.columns, result.rows))
        elif result.text:
            await transcript.add_notice(result.text, "info")

    async def _mount_notice(self, widget: Any) -> None:
        await self.transcript.mount(widget)
        self.transcript.anchor()

    def _ask(self, result: CommandResult) -> None:
        confirm = result.confirm
        assert confirm is not None

        def answered(yes: bool | None) -> None:
            if yes:
                self._start_command("confirmed", confirm.accept)
        self.push_screen(ConfirmScreen(confirm.question, yes=confirm.yes,
                                       destructive=confirm.destructive), answered)

    def _follow_model(self) -> str | None:
        """From the command's thread: a server beside the chat serves the model
        the command left the chat on (/model, a session of another model)."""
        if self.conversation is None:
            return None
        return self.serving.follow(self.conversation)

    # -- clipboard -------------------------------------------------------------------

    def action_copy_reply(self) -> None:
        conv = self.conversation
        reply = next((m for m in reversed(conv.messages) if m.role == "assistant"),
                     None) if conv else None
        if reply is None or not reply.content:
            self.notify("There is no reply to copy yet.", severity="warning")
            return
        self.copy_to_clipboard(reply.content)
        self.notify(f"Copied the last reply ({len(reply.content):,} characters).")

    def _copy_from_worker(self, text: str) -> None:
        """For /copy, which runs in a worker thread."""
        self._ui(self.copy_to_clipboard, text)

    # -- screens ---------------------------------------------------------------------

    def open_screen(self, name: str) -> None:
        if name == "help":
            self.push_screen(HelpScreen(self.registry.help_rows(), KEY_HELP))
        elif self.conversation is None:
            self.notify("The model is still loading.", severity="warning")
        elif name == "sessions":
            self._open_sessions()
        elif name == "models":
            self._models_worker()

    def _open_sessions(self) -> None:
        conv = self.conversation
        assert conv is not None
        changed = False

        def search(text: str) -> list:
            return conv.list_sessions(limit=200, search=text.strip() or None)

        def rename(session_id: int, title: str) -> None:
            nonlocal changed
            conv.rename(title, session_id)
            changed = changed or session_id == conv.session.id

        def delete(session_id: int) -> None:
            nonlocal changed
            # Deleting the open session opens a new empty one.
            changed = conv.delete_session(session_id).replacement is not None or changed

        async def chosen(session_id: int | None) -> None:
            if session_id is not None and session_id != conv.session.id:
                self.run_command(f"/open #{session_id}")
            elif changed:
                await self.reload_session()

        def pin(session_id: int, file: str) -> None:
            assert self.ctx is not None
            self._start_command("/pin", partial(pin_files, self.ctx, [file],
                                                session_id=session_id))

        self.push_screen(SessionsScreen(search=search, rename=rename, delete=delete,
                                        now=self._now, pin=pin), chosen)

    @work(thread=True, group="command", exit_on_error=False)
    def _models_worker(self) -> None:
        try:
            found = list((self.ctx.list_models if self.ctx is not None else catalog_models)())
        except Exception as exc:  # noqa: BLE001 - shown, never a traceback
            self._ui(self.transcript.add_notice, error_text(exc), "error")
            return
        self._ui(self._push_models, found)

    def _push_models(self, entries: list[ModelEntry]) -> None:
        cancel = threading.Event()

        def download(alias: str, progress: Callable[[int, int | None], None]) -> None:
            from mlxchat.models import ModelError, resolve_folder

            def report(stage: str, done: int, total: int) -> None:
                if cancel.is_set():
                    raise ModelError("download cancelled")  # unwinds resolve_folder
                progress(done, total or None)
            # A GGUF import runs MLX: on the app's thread.
            self.mlx.call(partial(resolve_folder, alias, progress=report))

        def chosen(alias: str | None) -> None:
            if alias is not None:
                self.run_command(f"/model {alias}")

        current = self.conversation.model_spec if self.conversation else None
        self.push_screen(ModelPickerScreen(entries, start_download=download, cancel_event=cancel,
                                           current=current), chosen)

    def palette_command(self, name: str) -> None:
        """From the palette: run a command that needs no argument, else start typing it."""
        command = self.registry.get(name)
        if command is None:
            return
        if command.min_args > 0:
            self.prompt.text = f"/{command.name} "
            self.prompt.focus()
        else:
            self.submit(f"/{command.name}")


class SlashCommandsProvider(Provider):
    """The registry's commands in the command palette (ctrl+p)."""

    def _commands(self) -> list:
        return self.app.registry.commands  # type: ignore[attr-defined]

    def _run(self, name: str) -> None:
        self.app.palette_command(name)  # type: ignore[attr-defined]

    async def discover(self) -> Hits:
        for command in self._commands():
            yield DiscoveryHit(f"/{command.name}", partial(self._run, command.name),
                               help=command.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query.lstrip("/") if query.strip() != "/" else query)
        for command in self._commands():
            score = matcher.match(command.name)
            if score > 0:
                yield Hit(score, matcher.highlight(f"/{command.name}"),
                          partial(self._run, command.name), text=f"/{command.name}",
                          help=command.help)
