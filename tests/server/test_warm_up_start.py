"""`mlxchat serve` warms the engine before it listens; a model that cannot be
warmed (its template refuses a lone user message, say) is served cold."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import llguidance

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import EngineError
from mlxchat.engine.prompt import control
from mlxchat.engine.turn.constrained import grammar_tokenizer
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


def test_after_a_restart_the_last_session_is_open_with_its_kv_before_any_request(tiny,
                                                                                 tmp_path):
    """The start reopens the session the API used last in the first slot,
    its KV restored: the next request of that conversation finds it live (as
    before the restart), and no empty start-up session is left behind."""
    from openai import OpenAI

    from tests.server.conftest import serve

    def turn(url: str, messages: list[dict], text: str) -> None:
        messages.append({"role": "user", "content": text})
        api = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        reply = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                            max_tokens=8)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})

    db, messages = tmp_path / "s.db", []
    first = serve(tiny, db, parallel=2)
    try:
        for i in range(2):
            turn(first.url, messages, f"Turn {i} before the restart.")
        used = first.conv.store.api.sessions_by_use()[-1]
    finally:
        first.stop()
    again = serve(tiny, db, parallel=2)
    try:
        again.service.warm_up()
        conv = again.conv
        assert conv.session.id == used and not conv.locks.held
        assert len(conv.engine.cached_tokens) > 20  # its branch's KV, restored
        others = {slot.conv.session.id for slot in again.service.slots.all[1:]}
        # The first slot's empty start-up session is gone (the other slot keeps its own).
        assert {s.id for s in conv.store.list_sessions()} == {used, *others}
        held = len(conv.engine.cached_tokens)
        reads: list[int] = []
        load = conv.engine.load_segments
        conv.engine.load_segments = lambda *a, **kw: reads.append(1) or load(*a, **kw)
        turn(again.url, messages, "The first turn after the restart.")
        assert not reads  # nothing read back from disk on the request's time
        assert conv.turns.last_stats.reused_tokens == held
    finally:
        again.stop()


def test_the_warm_up_reads_what_the_first_request_would_of_the_vocabulary(tmp_path,
                                                                          monkeypatch):
    """The longest token (the fit check's floor), the reasoning markup, whether
    plain text starts with a space and the grammar's token table are read once
    per tokenizer: by the warm-up, not by the first request after a start
    (4.7 s of it on Gemma 3's 262k-token vocabulary at a load of 13, and 18 s
    more for Codex's request, which has tools, at a load of 30)."""
    fresh = load_folder(write_tiny_model(tmp_path / "model"), name="tiny", spec="tiny")
    conv = open_conversation(Settings(model="tiny"), model_spec="tiny",
                             store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: fresh).conversation
    service = ChatService(conv, store=conv.store, engine=conv.engine)
    try:
        service.warm_up()

        def read_again(*args: object, **kwargs: object) -> None:
            raise AssertionError("the vocabulary was read again")
        monkeypatch.setattr(token_floor, "_has_byte_level", read_again)
        monkeypatch.setattr(markup, "_vocab", read_again)
        monkeypatch.setattr(control, "json", SimpleNamespace(loads=read_again))
        monkeypatch.setattr(llguidance, "LLTokenizer", read_again)
        anyio.run(service.check_fits, ["Hello, again."])
        assert service.engine.prompts.reply_reserve(conv.settings.generation) > 0
        assert control.encode_plain(fresh.tokenizer, "again", at_start=False)
        assert grammar_tokenizer(fresh.tokenizer) is not None  # a request's tools' grammar
    finally:
        service.close()
        conv.shutdown()
