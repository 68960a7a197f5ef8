"""The API served beside the chat (`mlxchat serve --tui`, the chat's `/serve`):
one process, the chat's model weights loaded once.

The server gets its slots (``--parallel``, ``server/core/slots.py``) over the
chat's ``LoadedModel`` (the same weights; engines and KV caches of their own,
so the chat's stays warm while clients are served) and conversations of their
own on the same database. The chat's engine is one more member of the slots'
batch: a chat reply and the API's decode in the same steps. Without a batch
(``--parallel 1``, or a model that cannot batch) the engines take turns under
the process's compute lock (``engine/thread/compute.py``).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Callable

from mlxchat.engine.batch.decoder import BatchDecoder
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.interface import Engine
from mlxchat.errors import MlxchatError, UserError
from mlxchat.models import LoadedModel
from mlxchat.server.app import build_app, image_limits
from mlxchat.server.core.service import ChatService
from mlxchat.server.options import ServeOptions, check_options
from mlxchat.server.runner import RunningServer
from mlxchat.session.conversation import Conversation, ModelLoader
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

API_OWNER = "api"
"""The API engine's name in the compute lock's line (the chat's is 'chat')."""
API_HOLDER = "the API server"
"""How a session refusal names the API's conversation."""
STOP_TIMEOUT_S = 10.0


EngineFactory = Callable[[LoadedModel], Engine]


def api_engine(loaded: LoadedModel) -> Engine:
    # The chat owns the shared weights' dtype: casting them back and forth would
    # leave each engine's cache cold after the other's turn.
    return ChatEngine(loaded, compute_owner=API_OWNER, casts_weights=False)


def shared_loader(loaded: LoadedModel, spec: str, load: ModelLoader | None) -> ModelLoader:
    """The chat's model as the same weights (no copy); any other (a draft) loaded
    as the chat would load it."""
    def shared(wanted: str, progress: object = None) -> LoadedModel:
        if wanted == spec:
            return loaded
        if load is None:
            raise UserError(f"The API server beside the chat cannot load {wanted}.")
        return load(wanted)
    return shared


class SharedServer:
    """A running server over ``chat``'s model; ``stop`` ends it in bounded time."""

    def __init__(self, chat: Conversation, options: ServeOptions, *,
                 engine_factory: EngineFactory = api_engine):
        if chat.views.split_across_ranks:
            raise UserError("A model split over several Macs cannot be served from the "
                            "chat yet; run `mlxchat serve` on one machine.")
        database = chat.saved.database
        if not database:
            raise UserError("This session's store is in memory: nothing to serve from.")
        opened = open_conversation(
            chat.settings, model_spec=chat.model_spec,
            store_factory=partial(open_store, database),
            load_model=shared_loader(chat.views.loaded, chat.model_spec, chat.model_loader),
            engine_factory=engine_factory, lock_holder=API_HOLDER)
        self.conversation = opened.conversation
        self.options = options
        service: ChatService | None = None
        try:
            self.service = service = ChatService(
                self.conversation, store=opened.store, engine=opened.engine,
                max_waiting=options.queue, kv_budget_bytes=options.kv_budget_bytes,
                parallel=options.parallel, context_policy=options.context_policy)
            self.server = RunningServer(
                build_app(service, api_key=options.api_key,
                          allow_image_urls=options.allow_image_urls,
                          image_fetch=image_limits(options), cors=options.cors),
                host=options.host, port=options.port,
                body_timeout_s=options.body_timeout_s).start()
        except BaseException:
            if service is not None:
                service.close()  # its lane thread
            self.conversation.shutdown()
            raise
        self._chat_views = chat.views
        self.batch = service.slots.batch
        """The API's batch, the chat's replies decoded in it too (None: alone)."""
        self._decode_in(self.batch)

    def _decode_in(self, batch: BatchDecoder | None) -> None:
        if self.batch is not None:
            self._chat_views.decode_in(batch)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def engine(self) -> Engine:
        return self.service.engine

    def chat_waits(self) -> bool:
        """An API job is ahead of the chat's waiting one in the compute lock's
        line (at most one: the API engine runs one job at a time, and the
        requests queued behind it come after the chat's)."""
        compute = getattr(self.engine, "compute", None)
        return compute is not None and API_OWNER in compute.ahead_of("chat")

    def kv_bytes(self) -> int:
        """What the API's KV caches hold, every slot's together."""
        return sum(slot.conv.views.state().kv_bytes for slot in self.service.slots.all)

    def describe(self) -> str:
        answered = self.service.answered
        return (f"Serving {self.service.model_id} at {self.url}/v1 (OpenAI) and "
                f"{self.url}/api (Ollama), {self.together()}; "
                f"{answered:,} request{'s' * (answered != 1)} answered.")

    def together(self) -> str:
        if self.batch is None:
            return "one request at a time, taking turns with the chat"
        return (f"{self.service.parallel} requests at once, decoded together with the "
                "chat's replies")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop listening, cancel a running request (its text so far is kept),
        let the API's session go and close its engine; the chat decodes alone
        from its next reply (one running in the batch ends first: the batch
        closes after its members)."""
        try:
            self.server.stop(timeout_s=timeout_s)
        finally:
            self._decode_in(None)
            self.service.close()
            self.conversation.shutdown()


class ServeControl:
    """What `/serve` starts and stops: at most one server beside the chat."""

    def __init__(self, defaults: ServeOptions = ServeOptions(), *,
                 engine_factory: EngineFactory = api_engine):
        self.defaults = defaults
        self.engine_factory = engine_factory
        self.running: SharedServer | None = None

    def start(self, chat: Conversation, *, host: str | None = None,
              port: int | None = None) -> SharedServer:
        if self.running is not None:
            raise UserError(f"Already serving at {self.running.url}; /serve off stops it.")
        options = replace(self.defaults, host=host or self.defaults.host,
                          port=self.defaults.port if port is None else port)
        check_options(options)
        self.running = SharedServer(chat, options, engine_factory=self.engine_factory)
        return self.running

    def stop(self) -> str | None:
        """The URL it served at, or None when nothing ran."""
        running, self.running = self.running, None
        if running is None:
            return None
        running.stop()
        return running.url

    def follow(self, chat: Conversation) -> str | None:
        """After the chat switched its model (/model, a session of another
        model): serve the chat's model instead, at the same address, and let the
        old engine and weights go. Says so in a line; None when nothing changed."""
        running = self.running
        if running is None or running.service.model_id == chat.model_spec:
            return None
        old, url = running.service.model_id, running.url
        options = replace(running.options, port=running.server.port)
        self.running = None
        running.stop()  # a request in flight is cut, its text so far kept
        try:
            self.running = SharedServer(chat, options, engine_factory=self.engine_factory)
        except MlxchatError as exc:
            return (f"The API server stopped serving {old} at {url} and could not serve "
                    f"{chat.model_spec} there ({exc.user_text()}); /serve starts it again.")
        return f"The API server at {url} now serves {chat.model_spec}, as the chat does."

    def chat_waits(self) -> bool:
        return self.running is not None and self.running.chat_waits()

    def kv_bytes(self) -> int:
        return self.running.kv_bytes() if self.running is not None else 0
