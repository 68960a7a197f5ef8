"""The mlxchat application: transcript, prompt and gauges over one Conversation.

``create_app`` builds it (``run_app`` and the tests use the same factory).
The window appears at once; the model loads with a progress line. The app
holds the screen's state and keys, and hands each concern to an object of its
own: a message sent while loading (``QueuedMessage``), a turn streamed into
the transcript (``TurnStream``) and its tool calls (``ToolSteps``), slash
commands (``CommandRunner``), screens (``ScreenOpener``), prefill while typing
(``TypingTimer``), the idle join of KV files (``IdleCompaction``), copying a
reply (``ReplyCopy``); the keys that scroll the transcript are in
``transcript_keys``. Turns and commands run in thread workers; the start-up
load and the commands run on the app's one MLX thread (``MlxThread``):
Textual's are pooled, MLX streams belong to a thread.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import var
from textual.widgets import Footer

from mlxchat.commands import CommandContext, Registry, default_registry
from mlxchat.config import ConfigError, Settings, remember
from mlxchat.server.options import ServeOptions
from mlxchat.session.mlx_thread import MlxThread
from mlxchat.session.root import (
    ConversationFactory,
    log_to_file,
    memory_budget,
    open_conversation,
)
from mlxchat.session.streams import release_thread_streams
from mlxchat.tui import HORIZONTAL_BREAKPOINTS, STYLESHEET, transcript_keys
from mlxchat.tui.command_runner import CommandRunner
from mlxchat.tui.idle_compaction import IdleCompaction
from mlxchat.tui.pictures import typed_ahead
from mlxchat.tui.queued_message import QueuedMessage
from mlxchat.tui.reply_copy import ReplyCopy
from mlxchat.tui.screen_opener import ScreenOpener, SlashCommandsProvider
from mlxchat.tui.serving import Serving, serve_command
from mlxchat.tui.start_up import StartUp
from mlxchat.tui.tool_steps import ToolSteps
from mlxchat.tui.turn_stream import TurnStream
from mlxchat.tui.typing_timer import TypingTimer
from mlxchat.tui.widgets import GaugesPanel, PromptInput, Transcript
from mlxchat.tui.widgets.activity import ActivityBar
from mlxchat.tui.widgets.header import TitleHeader

if TYPE_CHECKING:
    from mlxchat.session.conversation import Conversation

QUIT_WAIT_SECONDS = 10.0
"""On quit, how long a stopped reply gets to be committed before the app exits."""
EDIT_HINT = "editing your last message · enter answers it on a new branch · esc cancels"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class MlxChatApp(App[int]):
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
        *transcript_keys.SCROLL_BINDINGS,
    ]
    MAIN_SCREEN_ACTIONS = frozenset({"withdraw", "stop", "leave_edit", "new_session",
                                     "sessions", "copy_reply", "help", "toggle_thinking",
                                     "cancel_command", "scroll_transcript"})
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
        self.budget_bytes = memory_budget(settings)
        self._now = now
        self._cursor_blink = cursor_blink
        self.registry = registry or default_registry()
        self.serving = Serving(self, serve or ServeOptions(), at_start=serve is not None)
        if self.registry.get("serve") is None:
            self.registry.add(serve_command(self.serving))
        self.mlx = MlxThread()
        """Where the MLX work the app starts outside the engine runs (model loads)."""
        self.conversation: Conversation | None = None
        self.ctx: CommandContext | None = None
        self.start_error: str | None = None
        self.start_up = StartUp(self, conversation_factory, model_spec=model_spec,
                                session=session, continue_last=continue_last, pins=pins)
        """Loading the model and opening the session, once."""
        self.typing = TypingTimer(self)
        """When what is typed is prefilled."""
        self.queued_message = QueuedMessage(self)
        """A message sent while the model loads."""
        self.turn_stream = TurnStream(self)
        """Sending a message and streaming its reply."""
        self.tool_steps = ToolSteps(self)
        """A reply's tool calls: consent, the calls, their results."""
        self.commands = CommandRunner(self)
        """Running slash commands and acting on their results."""
        self.screens = ScreenOpener(self)
        self.compaction = IdleCompaction(self)
        """Joining the session's KV segment files once idle."""
        self.copying = ReplyCopy(self)

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

    def on_load(self) -> None:
        for event in typed_ahead():  # read by the terminal probe: before the driver's keys
            self.post_message(event)

    def on_mount(self) -> None:
        if self.settings.theme in self.available_themes:
            self.theme = self.settings.theme
        self.prompt.catch_early_keys()  # typed while it started: into the input
        self.activity.show("loading model…")
        self.start_up.begin()

    # -- a message sent while the model loads ---------------------------------------------

    def watch_running(self, running: str | None) -> None:
        if running is None:
            self.queued_message.send_when_ready()  # a start-up /pin finished

    def action_withdraw(self) -> None:
        if self.queued_message.take_back() is not None:
            self.notify("Withdrawn: nothing was sent.")

    async def reload_session(self) -> None:
        """Show the conversation's current branch, figures and title."""
        conv = self.conversation
        if conv is None:
            return
        self.transcript.assistant_label = conv.views.model_info.name
        self.transcript.formatter = conv.views.display_text
        self.transcript.reply_format = conv.views.reply_stream
        await self.transcript.load(conv.messages, session_id=conv.session.id)
        self.refresh_gauges()
        self.set_titles()

    def refresh_gauges(self) -> None:
        conv = self.conversation
        if conv is None or not self.query("#gauges"):  # none yet, or torn down at quit
            return
        state = self.serving.with_api(conv.views.state())
        # A new chat holds nothing yet, whatever the last one left in the KV cache
        # (kept warm: going back to it costs nothing).
        empty = 0 if not conv.messages and state.cached_tokens else None
        self.gauges.update_state(state, self.budget_bytes, context_tokens=empty)
        self.gauges.update_stats(conv.views.branch_stats())

    def set_titles(self) -> None:
        conv = self.conversation
        if conv is None:
            return
        self.title = conv.session.title
        self.sub_title = self.serving.subtitle(conv.views.model_info.name)
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
        if self.conversation is None or not self.start_up.ready:
            if self.start_error is None and not Registry.is_command(text):
                return self.queued_message.queue(text)
            why = self.start_error or "The model is still loading"
            return self.refuse(text, f"{why}. Nothing was sent.")
        if self.running:
            return self.refuse(text, f"Wait for {self.running} to finish.")
        if self.editing:
            if self.generating:
                return self.refuse(text, "A reply is being generated; stop it first.",
                                   editing=True)
            self.editing = False
            return self.commands.run(f"/edit {text}", restore=text, restore_editing=True)
        if Registry.is_command(text) or self.commands.dropped(text):
            return self.commands.run(text.strip(), restore=text)
        if self.generating:
            return self.refuse(text, "A reply is being generated: wait for it, or press "
                                     "escape to stop it.")
        if text.lstrip().startswith("//"):  # '//x' sends the literal '/x'
            text = text.replace("//", "/", 1)
        self.turn_stream.send(text)

    def refuse(self, text: str, why: str, *, editing: bool = False) -> None:
        """Put ``text`` back in the input (when it is empty) and say why it was not sent."""
        if not self.prompt.text:
            self.prompt.restore(text)
            self.editing = editing
        self.notify(why, severity="warning")

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
        if action == "scroll_transcript":
            return transcript_keys.applies(parameters, self.prompt.text)
        return True

    def action_scroll_transcript(self, where: str, _when: str = "") -> None:
        transcript_keys.scroll(self.transcript, where)

    def action_cancel_command(self) -> None:
        if self.ctx is not None:
            self.ctx.cancel.set()
            self.activity.show(f"cancelling {self.running}…")

    def action_stop(self) -> None:
        if self.conversation is not None:
            self.conversation.turns.cancel()

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
        text = conv.turns.last_user_text()
        if text is None:
            self.notify("There is no message to edit yet.")
            return
        self.editing = True
        message.prompt.text = text

    def action_new_session(self) -> None:
        self.submit("/new")

    def action_sessions(self) -> None:
        self.screens.open("sessions")

    def action_help(self) -> None:
        self.screens.open("help")

    def action_copy_reply(self) -> None:
        self.copying.last_reply()

    def action_toggle_thinking(self) -> None:
        """Fold or unfold the last reasoning or tool result."""
        if not self.transcript.toggle_last_fold():
            self.notify("No reply here has reasoning or tool results to show.",
                        severity="warning")

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
            self.conversation.turns.cancel()
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
