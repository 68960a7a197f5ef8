"""Switching models and back: each reply keeps the model that wrote it, /model
promises only what the next turn will really bring back from disk, and a
branch that went on with another model joins its files per model."""

from __future__ import annotations

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import PrefillProgress, TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store
from mlxchat.store.export import session_markdown

from tests.commands.conftest import send


def test_a_reply_keeps_the_model_that_wrote_it(registry, ctx, conv):
    send(conv, "One.")
    assert registry.run("/model tiny-b", ctx).ok
    send(conv, "Two.")
    assert registry.run("/model tiny", ctx).ok
    replies = [m for m in conv.messages if m.role == "assistant"]
    assert [m.stats.model for m in replies] == ["tiny", "tiny-b"]
    assert all(m.stats.model_quantization for m in replies)
    markdown = session_markdown(conv.store.get_session(conv.session.id))
    assert "_tiny (" in markdown and "_tiny-b (" in markdown


def test_model_switch_and_back_restores_what_it_promised(registry, ctx, conv):
    send(conv, "One.")
    send(conv, "Two.")
    to_b = registry.run("/model tiny-b", ctx)
    assert "nothing this conversation saved was made with this model" in to_b.text
    on_b = send(conv, "Three.")
    # Nothing was read from the other model's files: they could not be used.
    assert on_b.stats.cache_source == "cold" and on_b.stats.miss_reason == "model changed"
    back = registry.run("/model tiny", ctx)
    promised = conv.cache.saved_for_model()
    assert promised > 0 and f"brings back from disk the {promised:,} tokens" in back.text
    again = send(conv, "Four.")
    assert again.stats.cache_source == "snapshot" and again.stats.reused_tokens == promised
    joined = conv.cache.compact()
    assert joined is not None and joined.warning is None  # each model's files apart


def test_a_new_conversation_promises_nothing(registry, ctx, conv):
    result = registry.run("/model tiny-b", ctx)
    assert result.ok and "the KV cache in memory starts empty." in result.text


def test_a_reply_stopped_during_prefill_reports_what_was_computed(home, tmp_path, tiny):
    conv = Conversation(settings=Settings(generation=GenerationSettings(temperature=0.0)),
                        store=open_store(tmp_path / "s.db"), model_spec="tiny",
                        engine=ChatEngine(tiny, chunk_seconds=1e-4))  # chunks of 16
    events = conv.turns.send("Tell me about rivers. " * 40)
    done = None
    for event in events:
        if isinstance(event, PrefillProgress) and 0 < event.done < event.total:
            conv.turns.cancel()
        if isinstance(event, TurnDone):
            done = event
    assert done is not None and done.stats.finish_reason == "cancelled"
    stats = done.stats
    assert stats.generated_tokens == 0
    new = stats.prompt_tokens - stats.reused_tokens
    assert 0 < stats.prefilled_tokens < new
    assert stats.prefilled_tokens == stats.context_used - stats.reused_tokens
    conv.close()
