"""`mlxchat serve` warms the engine before it listens; a model that cannot be
warmed (its template refuses a lone user message, say) is served cold."""

from __future__ import annotations

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import EngineError
from mlxchat.server.core.service import ChatService
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store


class TemplateThatFails(ChatEngine):
    def warm_up(self) -> None:
        raise EngineError("the chat template cannot render a lone user message")


def test_a_model_that_cannot_warm_up_is_served_cold(tiny, tmp_path, caplog):
    conv = open_conversation(Settings(model="tiny"), model_spec="tiny",
                             store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: tiny,
                             engine_factory=TemplateThatFails).conversation
    service = ChatService(conv, store=conv.store, engine=conv.engine)
    try:
        service.warm_up()  # the start goes on
        assert "warm-up skipped: the chat template cannot render" in caplog.text
    finally:
        service.close()
        conv.shutdown()
