"""`mlxchat serve` warms the engine before it listens; a model that cannot be
warmed (its template refuses a lone user message, say) is served cold."""

from __future__ import annotations

import anyio

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import EngineError
from mlxchat.models import load_folder, markup, token_floor
from mlxchat.models.testing.text import write_tiny_model
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


def test_the_warm_up_reads_what_the_first_request_would_of_the_vocabulary(tmp_path,
                                                                          monkeypatch):
    """The longest token (the fit check's floor) and the reasoning markup are
    read once per tokenizer: by the warm-up, not by the first request after a
    start (4.7 s of it for Gemma 3's 262k-token vocabulary under load)."""
    fresh = load_folder(write_tiny_model(tmp_path / "model"), name="tiny", spec="tiny")
    conv = open_conversation(Settings(model="tiny"), model_spec="tiny",
                             store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: fresh).conversation
    service = ChatService(conv, store=conv.store, engine=conv.engine)
    try:
        service.warm_up()

        def read_again(*args: object) -> None:
            raise AssertionError("the vocabulary was read again")
        monkeypatch.setattr(token_floor, "_has_byte_level", read_again)
        monkeypatch.setattr(markup, "_vocab", read_again)
        anyio.run(service.check_fits, ["Hello, again."])
        assert service.engine.prompts.reply_reserve(conv.settings.generation) > 0
    finally:
        service.close()
        conv.shutdown()
