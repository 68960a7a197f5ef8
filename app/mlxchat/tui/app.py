"""The mlxchat application: transcript, prompt and gauges over one Conversation.

``create_app`` builds it (``run_app`` and the tests use the same factory).
The window appears at once; the model loads with a progress line. Every turn
and command runs in a thread worker; streamed text reaches the screen in
batches (``streaming.pump_turn``), so typing never stalls. The start-up load
and the commands (``/model`` loads) run on the app's one MLX thread
(``MlxThread``), their workers waiting for them: Textual's worker threads are
pooled and reused, and MLX streams belong to a thread.
"""

from __future__ import annotations

import asyncio
import gc
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import Footer

from mlxchat.commands import CommandContext, Registry, default_registry
from mlxchat.commands.pins import pin_files
from mlxchat.config import ConfigError, Settings, remember
from mlxchat.models import STAGE_LABELS
from mlxchat.server.options import ServeOptions
from mlxchat.session.mlx_thread import MlxThread
from mlxchat.session.root import (
    ConversationFactory,
    Opened,
    log_to_file,
    memory_budget,
    open_conversation,
)
from mlxchat.session.streams import release_thread_streams
from mlxchat.tui import HORIZONTAL_BREAKPOINTS, STYLESHEET
from mlxchat.tui.app_commands import CommandsMixin, SlashCommandsProvider, error_text
from mlxchat.tui.serving import Serving, serve_command
from mlxchat.tui.streaming import Pacer, pump_turn
from mlxchat.tui.typing_prefill import TypingPrefill
from mlxchat.tui.widgets import GaugesPanel, PromptInput, ReplyHandle, ThinkingBlock, Transcript
from mlxchat.tui.widgets.activity import ActivityBar
from mlxchat.tui.widgets.header import TitleHeader
from mlxchat.tui.widgets.transcript import UserMessage

if TYPE_CHECKING:
    from mlxchat.chat import Message
    from mlxchat.engine.events import Event, PrefillProgress, TextDelta, TurnDone
    from mlxchat.session.conversation import Conversation
    from mlxchat.session.retrieval import Retrieved

IDLE_COMPACT_SECONDS = 30.0
"""After a turn, how long the session stays idle before its segment files are joined."""
QUIT_WAIT_SECONDS = 10.0
"""On quit, how long a stopped reply gets to be committed before the app exits."""
LIVE_GAUGE_SECONDS = 1.0
"""How often the live figures (decoding, context, KV cache) refresh while text
streams: redrawing them costs ~5 ms of the UI thread, as much as the text's own
share of a frame."""
SETTLE_SECONDS = 0.1
"""At most this long a turn waits for the screen to lay out what it mounted."""
EDIT_HINT = "editing your last message · enter answers it on a new branch · esc cancels"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class MlxChatApp(CommandsMixin, App[int]):
    CSS_PATH = str(STYLESHEET)
    HORIZONTAL_BREAKPOINTS = HORIZONTAL_BREAKPOINTS
    COMMANDS = App.COMMANDS | {SlashCommandsProvider}
    TITLE = "mlxchat"
    BINDINGS: ClassVar[list[BindingType]] = [
        # Priority, so they win over the prompt's own keys (ctrl+c copy, ctrl+y
        # redo); check_action lets a key through when its action does not apply.
        Binding("escape", "withdraw", "Withdraw", priority=True),
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+c", "stop", "Stop", priority=True, show=False),
        Binding("escape", "leave_edit", "Cancel"),
        Binding("escape", "cancel_command", "Cancel", priority=True),
        Binding("ctrl+n", "new_session", "New", priority=True),
        Binding("ctrl+o", "sessions", "Sessions", priority=True),
        Binding("ctrl+y", "copy_reply", "Copy", priority=True),
        Binding("ctrl+t", "toggle_thinking", "Thinking", priority=True, show=False),
        Binding("f1", "help", "Help", priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]
    MAIN_SCREEN_ACTIONS = frozenset({"withdraw", "stop", "leave_edit", "new_session",
                                     "sessions", "copy_reply", "help", "toggle_thinking",
                                     "cancel_command"})
    CANCELLABLE_COMMANDS = frozenset({"/docs"})
    """Commands that stop early when escape sets ``ctx.cancel`` (indexing)."""

    generating: var[bool] = var(False, bindings=True)
    """A reply is being generated (escape stops it)."""
    editing: var[bool] = var(False, bindings=True)
    """Enter answers the edited last message on a new branch."""
    running: var[str | None] = var(None, bindings=True)
    """The slash command running in a thread, e.g. '/model'."""
    queued: var[str | None] = var(None, bindings=True)
    """A message sent while the model loads: it goes once the model is ready
    (escape withdraws it)."""

    def __init__(self, settings: Settings, *, model_spec: str | None,
                 conversation_factory: ConversationFactory, continue_last: bool,
                 session: str | None, now: Callable[[], float],
                 registry: Registry | None = None, cursor_blink: bool = True,
                 pins: Sequence[str] = (), serve: ServeOptions | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.model_spec = model_spec
        self.budget_bytes = memory_budget(settings)
        self._factory = conversation_factory
        self._continue_last = continue_last
        self._session_ref = session
        self._pins = tuple(pins)
        self._now = now
        self._cursor_blink = cursor_blink
        self.registry = registry or default_registry()
        self.serving = Serving(self, serve or ServeOptions(), at_start=serve is not None)
        if self.registry.get("serve") is None:
            self.registry.add(serve_command(self.serving))
        self.mlx = MlxThread()
        """Where the MLX work the app starts outside the engine runs (model loads):
        never on Textual's pooled worker threads, which are reused."""
        self.conversation: Conversation | None = None
        self.ctx: CommandContext | None = None
        self.start_error: str | None = None
        self._next_gauge = 0.0
        self._pacer = Pacer()
        """Learns what drawing an update costs; kept from turn to turn."""
        self.typing = TypingPrefill(self)
        self._queued_widget: UserMessage | None = None
        self._compact_timer: Timer | None = None

    # -- layout ----------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield TitleHeader(show_clock=False)
        yield GaugesPanel(id="gauges")
        yield Transcript(id="transcript")
        yield ActivityBar(id="activity")
        yield PromptInput(self._complete, cursor_blink=self._cursor_blink, id="prompt")
        yield Footer()

    @property
    def transcript(self) -> Transcript:
        return self.query_one("#transcript", Transcript)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one("#prompt", PromptInput)

    @property
    def gauges(self) -> GaugesPanel:
        return self.query_one("#gauges", GaugesPanel)

    @property
    def activity(self) -> ActivityBar:
        return self.query_one("#activity", ActivityBar)

    def _complete(self, text: str) -> list:
        return self.registry.complete(text, self.ctx) if self.ctx is not None else []

    def _ui(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` on the UI thread from a worker thread and return its result."""
        return self.call_from_thread(fn, *args)

    # -- start-up --------------------------------------------------------------------

    def on_mount(self) -> None:
        if self.settings.theme in self.available_themes:
            self.theme = self.settings.theme
        self.prompt.focus()
        self.activity.show("loading model…")
        self._start_worker()

    @work(thread=True, group="startup", exit_on_error=False)
    def _start_worker(self) -> None:
        shown: dict[str, int] = {}

        def progress(stage: str, done: int, total: int) -> None:
            percent = done * 100 // total if total else -1
            if shown.get(stage) != percent:  # at most 100 updates a stage
                shown[stage] = percent
                self._ui(self.activity.show,
                         f"{STAGE_LABELS.get(stage, stage)} model…", done, total)
        try:
            opened = self.mlx.call(partial(
                self._factory, self.settings, model_spec=self.model_spec,
                session=self._session_ref, continue_last=self._continue_last,
                progress=progress))
        except Exception as exc:  # noqa: BLE001 - shown in the transcript
            self._ui(self._start_failed, error_text(exc))
            return
        if self.serving.at_start:  # mlxchat serve --tui
            try:
                server = self.mlx.call(partial(self.serving.start, opened.conversation))
                opened.notices.append((server.describe(), "info"))
            except Exception as exc:  # noqa: BLE001 - the chat still runs
                opened.notices.append((f"Not serving: {error_text(exc)}", "error"))
        self._ui(self._started, opened)

    async def _started(self, opened: Opened) -> None:
        conv = opened.conversation
        self.conversation = conv
        self.ctx = CommandContext(conv, clipboard=self._copy_from_worker, now=self._now,
                                  interactive=True, progress=self._command_progress)
        self.activity.hide()
        await self.reload_session()
        await self._show_queued()  # the reload cleared it; it goes once nothing runs
        if not gc.get_freeze_count():
            # What exists now (the model, its tokenizer, the libraries, the widgets)
            # lives as long as the app: out of the collector's sight, a full
            # collection no longer takes ~75 ms holding the interpreter lock
            # mid-reply (bench/tui.py). Once a process: a second app (tests) adds nothing.
            gc.collect()
            gc.freeze()
        for text, level in opened.notices:
            await self.transcript.add_notice(text, level)
        if self._pins:  # mlxchat --pin FILE
            self._start_command("/pin", partial(pin_files, self.ctx, self._pins))
        self._send_queued()

    async def _start_failed(self, text: str) -> None:
        self.start_error = text
        self.activity.hide()
        await self.transcript.add_notice(f"Could not load the model: {text}", "error")
        if self.queued is not None:
            self._take_back_queued()
            await self.transcript.add_notice("Your message was not sent; it is back in the "
                                             "input.", "warning")

    # -- a message sent while the model loads ---------------------------------------------

    def _queue(self, text: str) -> None:
        if self.queued is not None:
            return self._refuse(text, "A message is already waiting for the model; escape "
                                      "withdraws it.")
        self.queued = text
        self.call_next(self._show_queued)
        self.notify("The model is still loading: your message goes once it is ready "
                    "(escape withdraws it).")

    async def _show_queued(self) -> None:
        if self.queued is not None and self._queued_widget is None:
            self._queued_widget = await self.transcript.add_user(self.queued, pending=True)

    def _drop_queued(self) -> str | None:
        """Forget the waiting message and take it off the screen; its text."""
        text, self.queued = self.queued, None
        if self._queued_widget is not None:
            self._queued_widget.remove()
            self._queued_widget = None
        return text

    def _take_back_queued(self) -> str | None:
        """Forget the waiting message and put it back in the input."""
        text = self._drop_queued()
        if text is not None and not self.prompt.text:
            self.prompt.restore(text)
        return text

    def _send_queued(self) -> None:
        """Send the waiting message once the model is ready and nothing else runs."""
        if (self.queued is None or self.conversation is None or self.running
                or self.generating):
            return
        text = self._drop_queued()  # shown again as sent, or back in the input
        assert text is not None
        self.submit(text)

    def watch_running(self, running: str | None) -> None:
        if running is None:
            self._send_queued()  # a start-up /pin finished

    def action_withdraw(self) -> None:
        if self._take_back_queued() is not None:
            self.notify("Withdrawn: nothing was sent.")

    async def reload_session(self) -> None:
        """Show the conversation's current branch, figures and title."""
        conv = self.conversation
        if conv is None:
            return
        self.transcript.assistant_label = conv.model_info.name
        self.transcript.formatter = conv.display_text
        self.transcript.reply_format = conv.reply_stream
        await self.transcript.load(conv.messages)
        self.refresh_gauges()
        self.set_titles()

    def refresh_gauges(self) -> None:
        conv = self.conversation
        if conv is None:
            return
        state = self.serving.with_api(conv.state())
        # A new chat holds nothing yet, whatever the last one left in the KV cache
        # (kept warm: going back to it costs nothing).
        empty = 0 if not conv.messages and state.cached_tokens else None
        self.gauges.update_state(state, self.budget_bytes, context_tokens=empty)
        self.gauges.update_stats(conv.branch_stats())

    def set_titles(self) -> None:
        conv = self.conversation
        if conv is None:
            return
        self.title = conv.session.title
        self.sub_title = self.serving.subtitle(conv.model_info.name)
        if self._driver is not None and not self.is_headless:
            # The terminal's own window title (OSC 2).
            self._driver.write(f"\x1b]2;{_CONTROL.sub(' ', self.title)} · mlxchat\x07")

    # -- sending -----------------------------------------------------------------------

    async def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        message.stop()
        self.submit(message.text)

    def on_prompt_input_edited(self, message: PromptInput.Edited) -> None:
        message.stop()
        self.typing.changed(message.text, at_once=message.at_once)

    def submit(self, text: str) -> None:
        """What Enter does with ``text``: a /command, an edit, or a message."""
        if self.conversation is None:
            if self.start_error is None and not Registry.is_command(text):
                return self._queue(text)
            why = self.start_error or "The model is still loading"
            return self._refuse(text, f"{why}. Nothing was sent.")
        if self.running:
            return self._refuse(text, f"Wait for {self.running} to finish.")
        if self.editing:
            if self.generating:
                return self._refuse(text, "A reply is being generated; stop it first.",
                                    editing=True)
            self.editing = False
            return self.run_command(f"/edit {text}", restore=text, restore_editing=True)
        if Registry.is_command(text):
            return self.run_command(text.strip(), restore=text)
        if self.generating:
            return self._refuse(text, "A reply is being generated: wait for it, or press "
                                      "escape to stop it.")
        if text.lstrip().startswith("//"):  # '//x' sends the literal '/x'
            text = text.replace("//", "/", 1)
        self.generating = True
        self._send_worker(text)

    def _refuse(self, text: str, why: str, *, editing: bool = False) -> None:
        if not self.prompt.text:
            self.prompt.restore(text)
            self.editing = editing
        self.notify(why, severity="warning")

    @work(thread=True, group="turn", exit_on_error=False)
    def _send_worker(self, text: str) -> None:
        conv = self.conversation
        assert conv is not None
        if conv.generation.docs is not None:
            self._ui(self.activity.show, f"retrieving from {conv.generation.docs}…")
        try:
            events = conv.send(text)  # checks the window and commits the message
        except Exception as exc:  # noqa: BLE001 - EngineError, StoreError, ...
            self._ui(self._send_failed, text, error_text(exc))
            return
        finally:
            if conv.generation.docs is not None:
                self._ui(self.activity.hide)
        self._ui(self._show_sent, conv.messages[-1], conv.retrieval.last)
        self._stream_turn(events)

    async def _send_failed(self, text: str, error: str) -> None:
        self.generating = False
        await self.transcript.add_notice(error, "error")
        if not self.prompt.text:
            self.prompt.restore(text)

    async def _show_sent(self, message: Message, retrieved: Retrieved | None) -> None:
        """The message as sent, and before its prefill what it retrieved and costs."""
        if retrieved is not None and message.sources:
            await self.transcript.add_user(message.content, sources=message.sources,
                                           forecast_s=retrieved.forecast_s,
                                           left_out=retrieved.left_out)
        else:
            await self.transcript.add_user(message.content, sources=message.sources)
        self.set_titles()

    def _stream_turn(self, events: Iterator[Event]) -> None:
        """Consume a started turn on this worker thread, batching onto the UI."""
        reply: ReplyHandle = self._ui(self.transcript.start_reply)
        self._settle_screen()
        pacer = self._pacer
        pacer.restart()

        def show(batch: TextDelta) -> None:
            pacer.record(self._ui(self._show_batch, reply, batch))
        try:
            done = pump_turn(events, on_text=show, interval=pacer,
                             on_prefill=partial(self._ui, self._show_prefill))
        except Exception as exc:  # noqa: BLE001 - an engine failure mid-turn
            self._ui(self._turn_finished, reply, None, error_text(exc))
            return
        self._ui(self._turn_finished, reply, done, None)

    def _settle_screen(self) -> None:
        """On a worker thread: wait (at most SETTLE_SECONDS) until the screen has
        laid out the message and the reply's frame, so that work is done before
        the model starts instead of in a fast model's first half second of
        decoding (bench/tui.py --quick: the UI thread's share of the decode time
        went from 4.1% to 3.6%)."""
        settled = threading.Event()
        self._ui(self.call_after_refresh, settled.set)
        settled.wait(SETTLE_SECONDS)

    def _show_prefill(self, progress: PrefillProgress) -> None:
        self.gauges.prefill(progress)
        now = time.monotonic()
        done = progress.done >= progress.total
        if now >= self._next_gauge or done:
            # Once prefilled, the first text batch shows 'decoding' at once.
            self._next_gauge = 0.0 if done else now + LIVE_GAUGE_SECONDS
            self.gauges.live_cache(progress.cached_tokens, progress.kv_bytes)

    async def _show_batch(self, reply: ReplyHandle, batch: TextDelta) -> float:
        """Returns this thread's CPU time, from which the pacer learns what drawing costs."""
        await reply.append(batch.text, batch.part)
        now = time.monotonic()
        if now >= self._next_gauge:  # the live figures need not move with every batch
            self._next_gauge = now + LIVE_GAUGE_SECONDS
            self.gauges.decoding(batch.generated_tokens, batch.decode_tps, batch.part,
                                 speculation=batch)
            self.gauges.live_cache(batch.cached_tokens, batch.kv_bytes)
        return time.thread_time()

    async def _turn_finished(self, reply: ReplyHandle, done: TurnDone | None,
                             error: str | None) -> None:
        stats = done.stats if done is not None else None
        await reply.finish(stats, cancelled=stats is None or stats.finish_reason == "cancelled")
        self.generating = False
        self.serving.watch()  # a "waiting for the API" line goes with the turn, not a tick later
        self.gauges.idle()
        self.refresh_gauges()
        self.set_titles()
        self.typing.changed(self.prompt.text, at_once=True)  # what was typed meanwhile
        self._compact_later()
        if error is not None:
            await self.transcript.add_notice(error, "error")
        elif done is not None and done.dropped_messages:
            await self.transcript.add_notice(
                f"The {done.dropped_messages:,} oldest messages were left out to fit the "
                "context window.", "warning")

    # -- the KV cache on disk, while idle ---------------------------------------------------

    def _compact_later(self) -> None:
        """Join the branch's segment files once the session has been idle a
        while (a reopen then reads one file per branch, not one per turn)."""
        if self._compact_timer is not None:
            self._compact_timer.stop()
        self._compact_timer = self.set_timer(IDLE_COMPACT_SECONDS, self._compact_if_idle)

    def _compact_if_idle(self) -> None:
        if self.conversation is None or self.generating or self.running:
            return  # the next turn's end asks again
        self._compact_worker(self.conversation)

    @work(thread=True, group="compact", exclusive=True, exit_on_error=False)
    def _compact_worker(self, conv: Conversation) -> None:
        # Waits for a turn's segment being written (and a turn waits for it):
        # the cache keeper serializes them. Never raises; a failure is logged.
        conv.compact_cache()

    # -- keys ----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.MAIN_SCREEN_ACTIONS and len(self.screen_stack) > 1:
            return False  # a dialog is open: its own keys apply
        if action == "withdraw":
            return self.queued is not None
        if action == "stop":
            return self.generating
        if action == "leave_edit":
            return self.editing
        if action == "cancel_command":
            return self.running in self.CANCELLABLE_COMMANDS
        if action in ("new_session", "sessions"):
            return None if self.generating or self.running or not self.conversation else True
        return True

    def action_cancel_command(self) -> None:
        if self.ctx is not None:
            self.ctx.cancel.set()
            self.activity.show(f"cancelling {self.running}…")

    def _command_progress(self, label: str, done: int | None, total: int | None) -> None:
        """From a command's thread: its progress on the activity line."""
        try:
            self._ui(self.activity.show, label, done, total)
        except RuntimeError:  # the app is closing: the command was told to stop
            pass

    def action_stop(self) -> None:
        if self.conversation is not None:
            self.conversation.cancel()

    def action_leave_edit(self) -> None:
        self.editing = False
        self.prompt.clear()

    def watch_editing(self, editing: bool) -> None:
        prompt = self.prompt
        prompt.set_class(editing, "-editing")
        prompt.area.border_title = EDIT_HINT if editing else None

    def on_prompt_input_edit_last(self, message: PromptInput.EditLast) -> None:
        message.stop()
        conv = self.conversation
        if conv is None or self.generating or self.running:
            return
        text = conv.last_user_text()
        if text is None:
            self.notify("There is no message to edit yet.")
            return
        self.editing = True
        message.prompt.text = text

    def action_new_session(self) -> None:
        self.submit("/new")

    def action_sessions(self) -> None:
        self.open_screen("sessions")

    def action_help(self) -> None:
        self.open_screen("help")

    def action_toggle_thinking(self) -> None:
        """Fold or unfold the reasoning of the last reply that has some."""
        blocks = [b for b in self.transcript.query(ThinkingBlock) if b.text]
        if not blocks:
            self.notify("No reply here has reasoning to show.", severity="warning")
            return
        blocks[-1].toggle()

    def watch_theme(self, theme: str) -> None:
        if theme == self.settings.theme:
            return
        self.settings.theme = theme
        try:
            remember("theme", theme)
        except (OSError, ConfigError) as exc:
            self.notify(f"Theme not saved: {exc}", severity="warning")

    async def action_quit(self) -> None:
        """Stop a reply, let it be committed (partial text included), and an
        index being built keep the files it read (whole), then exit."""
        deadline = time.monotonic() + QUIT_WAIT_SECONDS
        if self.generating and self.conversation is not None:
            self.conversation.cancel()
            while self.generating and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        if self.running in self.CANCELLABLE_COMMANDS and self.ctx is not None:
            self.ctx.cancel.set()
            while self.running and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        self.exit(0)

    async def on_unmount(self) -> None:
        self.serving.stop_watch()
        await asyncio.to_thread(partial(self.serving.stop, redraw=False))  # bounded
        conv, self.conversation = self.conversation, None
        if conv is not None:
            await asyncio.to_thread(conv.shutdown)
        await asyncio.to_thread(self.mlx.stop)  # its streams released on it


def create_app(settings: Settings, *, model_spec: str | None = None,
               conversation_factory: ConversationFactory | None = None,
               continue_last: bool = False, session: str | None = None,
               now: Callable[[], float] = time.time, cursor_blink: bool = True,
               pins: Sequence[str] = (), serve: ServeOptions | None = None) -> MlxChatApp:
    """The app, for ``run_app`` and for tests. ``conversation_factory`` defaults to
    ``app_root.open_conversation`` (the real store and ``load_model``); it runs in
    a thread and gets a ``progress(stage, done, total)`` callback."""
    return MlxChatApp(settings, model_spec=model_spec,
                      conversation_factory=conversation_factory or open_conversation,
                      continue_last=continue_last, session=session, now=now,
                      cursor_blink=cursor_blink, pins=pins, serve=serve)


def run_app(settings: Settings, *, model: str | None = None, continue_last: bool = False,
            session: str | None = None, pins: Sequence[str] = (),
            conversation_factory: ConversationFactory | None = None,
            serve: ServeOptions | None = None) -> int:
    """Run the chat UI until the user quits (``serve``: with the API served
    beside it from the start); returns the exit status."""
    app = create_app(settings, model_spec=model, continue_last=continue_last, session=session,
                     pins=pins, conversation_factory=conversation_factory, serve=serve)
    with log_to_file():
        result = app.run()
    release_thread_streams()
    return result if isinstance(result, int) else (app.return_code or 0)
