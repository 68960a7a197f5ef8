"""The API server beside the chat: the `/serve` command, the server's address
in the title, the chat's turn waiting for an API request on the activity line,
and the server stopped when the app quits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mlxchat.commands import Args, Command, CommandContext, CommandError, CommandResult
from mlxchat.server.options import BindRefused, ServeOptions, is_loopback

if TYPE_CHECKING:
    from mlxchat.engine.events import EngineState
    from mlxchat.server.beside import ServeControl, SharedServer
    from mlxchat.session.conversation import Conversation

WATCH_SECONDS = 0.25
"""How often, while serving, the app looks whether the chat's turn waits."""
USAGE = "/serve [PORT | HOST:PORT | off]"
WAITING = "waiting for the API to finish a request"


def parse_address(word: str) -> tuple[str | None, int]:
    """'8080' -> (None, 8080); '0.0.0.0:8080' -> ('0.0.0.0', 8080)."""
    host, _, port = word.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number < 65536 or (":" in word and not host):
        raise CommandError(f"{USAGE}: a port is 0 to 65535 (0: any free one); got {word!r}")
    return (host.strip("[]") or None), number


class Serving:
    """The app's server, if any: one per app; ``changed`` runs on the UI thread."""

    def __init__(self, app: Any, defaults: ServeOptions, *, at_start: bool = False):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""
        self.defaults = defaults
        self._control: ServeControl | None = None
        """Made at the first /serve: the HTTP stack is imported then."""
        self.at_start = at_start
        """`mlxchat serve --tui`: serve once the model is loaded."""
        self._timer: Any = None
        self._waiting_shown = False
        self._api_kv_shown = 0

    @property
    def running(self) -> SharedServer | None:
        return self._control.running if self._control is not None else None

    @property
    def control(self) -> ServeControl:
        if self._control is None:
            from mlxchat.server.beside import ServeControl

            self._control = ServeControl(self.defaults)
        return self._control

    def start(self, chat: Conversation, word: str | None = None) -> SharedServer:
        """From a worker thread: start serving beside ``chat``."""
        host, port = parse_address(word) if word is not None else (None, None)
        wanted = host or self.defaults.host
        if not is_loopback(wanted) and not self.defaults.api_key:
            raise BindRefused(f"Serving on {wanted} from the chat needs a key given on the "
                              "command line (mlxchat serve --tui --api-key-file PATH); "
                              "/serve PORT serves on 127.0.0.1.")
        server = self.control.start(chat, host=host, port=port)
        self.app.call_from_thread(self.changed)
        return server

    def stop(self, *, redraw: bool = True) -> str | None:
        """From a worker thread (at quit: ``redraw=False``, after ``stop_watch``
        on the UI thread): stop serving; the URL it served at."""
        url = self._control.stop() if self._control is not None else None
        if url is not None and redraw:
            self.app.call_from_thread(self.changed)
        return url

    def follow(self, chat: Conversation) -> str | None:
        """From a worker thread, after a command: a server beside the chat
        follows the chat's model (``ServeControl.follow``); the line saying so."""
        if self._control is None or self.running is None:
            return None
        notice = self._control.follow(chat)
        if notice is not None:
            self.app.call_from_thread(self.changed)
        return notice

    # -- on the UI thread ------------------------------------------------------------

    def stop_watch(self) -> None:
        """At quit, before ``stop`` runs on a thread: a Textual timer is stopped here."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def changed(self) -> None:
        """Started or stopped: the title, the gauges and the waiting watch follow."""
        if self.running is not None and self._timer is None:
            self._timer = self.app.set_interval(WATCH_SECONDS, self.watch)
        elif self.running is None and self._timer is not None:
            self._timer.stop()
            self._timer = None
            self.watch()
        self.app.set_titles()
        self.app.refresh_gauges()

    def subtitle(self, model: str) -> str:
        return f"{model} · serving {self.running.url}" if self.running else model

    def with_api(self, state: EngineState) -> EngineState:
        """The chat engine's figures plus what the API engine's KV cache holds."""
        self._api_kv_shown = self.control.kv_bytes() if self.running else 0
        return replace(state, api_kv_bytes=self._api_kv_shown)

    def watch(self) -> None:
        """While the chat's turn waits for an API request, the activity line says
        so; while it does not run, the gauges follow the API's KV cache."""
        app = self.app
        if not app.query("#gauges"):  # a tick after the screen was torn down at quit
            return
        if not app.generating and self.running and self.control.kv_bytes() != self._api_kv_shown:
            app.refresh_gauges()
        activity = app.activity
        if app.generating and self.running and self.control.chat_waits():
            activity.show(WAITING)
            self._waiting_shown = True
        elif self._waiting_shown:
            self._waiting_shown = False
            activity.hide()


def serve_command(serving: Serving) -> Command:
    def run(ctx: CommandContext, args: Args) -> CommandResult:
        word = args.get(0)
        if word is None:
            running = serving.running
            return CommandResult.info(running.describe() if running else
                                      f"Not serving; {USAGE} starts the OpenAI and Ollama "
                                      "APIs over this model.")
        if word.lower() == "off":
            url = serving.stop()
            return CommandResult.info(f"Stopped serving at {url}." if url else "Not serving.")
        return CommandResult.info(serving.start(ctx.conversation, word).describe())

    return Command("serve", run, "Serve the OpenAI and Ollama APIs over this model",
                   usage=USAGE, max_args=1,
                   details="Starts an HTTP server in this process on the loaded model "
                   "(its weights are shared; the server keeps KV caches of its own and, with "
                   "serve --parallel above 1, decodes its requests in one batch with the "
                   "chat's replies). "
                   "It computes in the chat's compute dtype. /serve PORT serves on "
                   "127.0.0.1 (0: any free port); another host needs mlxchat serve --tui "
                   "--api-key-file PATH (or $MLXCHAT_API_KEY). After /model it serves the chat's new model at the same "
                   "address. /serve off stops it; /serve alone says where it serves "
                   "and how many requests it answered.")
