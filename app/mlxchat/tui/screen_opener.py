"""The app's screens: help, the sessions browser and the model picker, each
given its data and actions; and the command palette's way into the commands."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from textual.command import DiscoveryHit, Hit, Hits, Provider

from mlxchat.commands.base import catalog_models
from mlxchat.commands.pins import pin_files
from mlxchat.tui.failures import error_text
from mlxchat.tui.screens import HelpScreen, ModelPickerScreen, SessionsScreen

if TYPE_CHECKING:
    from mlxchat.models import ModelEntry

KEY_HELP = [
    ("enter", "send the message, or run the /command"),
    ("ctrl+j / alt+enter", "new line in the message"),
    ("tab / ↑ ↓", "accept / move in the completion list"),
    ("↑ in an empty prompt", "edit your last message (answered on a new branch)"),
    ("escape / ctrl+c", "stop the reply; the text so far is kept"),
    ("PageUp / PageDown", "scroll the conversation (ctrl+↑ ↓: three lines)"),
    ("ctrl+home / ctrl+end", "top / bottom of the conversation (home / end in an empty prompt)"),
    ("ctrl+n", "new session"),
    ("ctrl+o", "browse, search, rename and delete sessions"),
    ("ctrl+y", "copy the last reply (OSC 52)"),
    ("ctrl+t", "fold or unfold the last reply's thinking"),
    ("ctrl+p", "command palette: commands and themes"),
    ("f1", "this help"),
    ("ctrl+q", "quit; the session and its KV cache are saved"),
]


class ScreenOpener:
    """One per app, on the UI thread."""

    def __init__(self, app: Any):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""

    def open(self, name: str) -> None:
        app = self.app
        if name == "help":
            app.push_screen(HelpScreen(app.registry.help_sections(), KEY_HELP))
        elif app.conversation is None:
            app.notify("The model is still loading.", severity="warning")
        elif name == "sessions":
            self._sessions()
        elif name == "models":
            app.run_worker(self._find_models, thread=True, group="command",
                           exit_on_error=False)

    def _sessions(self) -> None:
        app = self.app
        conv = app.conversation
        assert conv is not None
        changed = False

        def search(text: str) -> list:
            return conv.saved.list(limit=200, search=text.strip() or None)

        def rename(session_id: int, title: str) -> None:
            nonlocal changed
            conv.saved.rename(title, session_id)
            changed = changed or session_id == conv.session.id

        def delete(session_id: int) -> None:
            nonlocal changed
            # Deleting the open session opens a new empty one.
            changed = conv.delete_session(session_id).replacement is not None or changed

        async def chosen(session_id: int | None) -> None:
            if session_id is not None and session_id != conv.session.id:
                app.commands.run(f"/open #{session_id}")
            elif changed:
                await app.reload_session()

        def pin(session_id: int, file: str) -> None:
            assert app.ctx is not None
            app.commands.start("/pin", partial(pin_files, app.ctx, [file],
                                               session_id=session_id))

        app.push_screen(SessionsScreen(search=search, rename=rename, delete=delete,
                                       now=app._now, pin=pin), chosen)

    def _find_models(self) -> None:
        app = self.app
        try:
            found = list((app.ctx.list_models if app.ctx is not None else catalog_models)())
        except Exception as exc:  # noqa: BLE001 - shown, never a traceback
            app._ui(app.transcript.add_notice, error_text(exc), "error")
            return
        app._ui(self._models, found)

    def _models(self, entries: list[ModelEntry]) -> None:
        app = self.app
        cancel = threading.Event()

        def download(alias: str, progress: Callable[[int, int | None], None]) -> None:
            from mlxchat.models import ModelError, resolve_folder

            def report(stage: str, done: int, total: int) -> None:
                if cancel.is_set():
                    raise ModelError("download cancelled")  # unwinds resolve_folder
                progress(done, total or None)
            # A GGUF import runs MLX: on the app's thread.
            app.mlx.call(partial(resolve_folder, alias, progress=report))

        def chosen(alias: str | None) -> None:
            if alias is not None:
                app.commands.run(f"/model {alias}")

        current = app.conversation.model_spec if app.conversation else None
        app.push_screen(ModelPickerScreen(entries, start_download=download, cancel_event=cancel,
                                          current=current), chosen)

    def palette_command(self, name: str) -> None:
        """From the palette: run a command that needs no argument, else start typing it."""
        app = self.app
        command = app.registry.get(name)
        if command is None:
            return
        if command.min_args > 0:
            app.prompt.text = f"/{command.name} "
            app.prompt.focus()
        else:
            app.submit(f"/{command.name}")


class SlashCommandsProvider(Provider):
    """The registry's commands in the command palette (ctrl+p)."""

    def _commands(self) -> list:
        return self.app.registry.commands  # type: ignore[attr-defined]

    def _run(self, name: str) -> None:
        self.app.screens.palette_command(name)  # type: ignore[attr-defined]

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
