"""The app's start: the model loads (its progress on the activity line) and the
session opens on the app's MLX thread, then the chat is ready; a message sent
meanwhile goes once it is. ``mlxchat serve --tui`` starts serving here too."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from functools import partial
from typing import Any

from mlxchat.commands import CommandContext
from mlxchat.commands.pins import pin_files
from mlxchat.models import STAGE_LABELS
from mlxchat.session.root import ConversationFactory, Opened
from mlxchat.tui.failures import error_text


class StartUp:
    """One per app; ``begin`` once, from ``on_mount``."""

    def __init__(self, app: Any, factory: ConversationFactory, *, model_spec: str | None,
                 session: str | None, continue_last: bool, pins: Sequence[str] = ()):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""
        self._factory = factory
        self._open = dict(model_spec=model_spec, session=session, continue_last=continue_last)
        self._pins = tuple(pins)
        self.ready = False
        """True once the opened session is on screen: a message sent before then
        waits (sent while the transcript reloads, it would be cleared off it)."""

    def begin(self) -> None:
        self.app.run_worker(self._load, thread=True, group="startup", exit_on_error=False)

    def _load(self) -> None:
        app = self.app
        shown: dict[str, int] = {}

        def progress(stage: str, done: int, total: int) -> None:
            percent = done * 100 // total if total else -1
            if shown.get(stage) != percent:  # at most 100 updates a stage
                shown[stage] = percent
                app._ui(app.activity.show,
                        f"{STAGE_LABELS.get(stage, stage)} model…", done, total)
        try:
            opened = app.mlx.call(partial(self._factory, app.settings, progress=progress,
                                          **self._open))
        except Exception as exc:  # noqa: BLE001 - shown in the transcript
            app._ui(self._failed, error_text(exc))
            return
        if app.serving.at_start:  # mlxchat serve --tui
            try:
                server = app.mlx.call(partial(app.serving.start, opened.conversation))
                opened.notices.append((server.describe(), "info"))
            except Exception as exc:  # noqa: BLE001 - the chat still runs
                opened.notices.append((f"Not serving: {error_text(exc)}", "error"))
        app._ui(self._ready, opened)

    async def _ready(self, opened: Opened) -> None:
        app = self.app
        conv = opened.conversation
        app.conversation = conv
        conv.compactor.on_change = partial(self._later, app.refresh_gauges)
        app.ctx = CommandContext(conv, clipboard=app.copying.from_worker, now=app._now,
                                 interactive=True, progress=app.commands.progress)
        app.activity.hide()
        await app.reload_session()
        await app.queued_message.show()  # the reload cleared it; it goes once nothing runs
        if not gc.get_freeze_count():
            # What exists now (the model, its tokenizer, the libraries, the widgets)
            # lives as long as the app: out of the collector's sight, a full
            # collection no longer takes ~75 ms holding the interpreter lock
            # mid-reply (bench/tui.py). Once a process: a second app (tests) adds nothing.
            gc.collect()
            gc.freeze()
        for text, level in opened.notices:
            await app.transcript.add_notice(text, level)
        if self._pins:  # mlxchat --pin FILE
            app.commands.start("/pin", partial(pin_files, app.ctx, self._pins))
        self.ready = True
        app.queued_message.send_when_ready()

    def _later(self, fn) -> None:
        """``fn`` on the UI thread, from the compaction's thread (nothing once the app is gone)."""
        try:
            self.app.call_from_thread(fn)
        except RuntimeError:  # the app stopped, or this is its own thread
            pass

    async def _failed(self, text: str) -> None:
        app = self.app
        app.start_error = text
        app.activity.hide()
        await app.transcript.add_notice(f"Could not load the model: {text}", "error")
        if app.queued is not None:
            app.queued_message.take_back()
            await app.transcript.add_notice("Your message was not sent; it is back in the "
                                            "input.", "warning")
