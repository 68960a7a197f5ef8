"""Every figure a turn shows is a measurement or is not shown (issue 47): no
ttft for a turn stopped before its first token, a first message typed ahead
is not a "cold start", a new conversation is not a cache "miss"."""

from __future__ import annotations

from pathlib import Path

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import PrefillProgress, TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store
from mlxchat.store.export import markdown_stats_line
from mlxchat.turn_stats import NEW_CONVERSATION

MESSAGE = "Tell me about the rivers, the harvests and the people of the coast please"


def make(tiny, db: Path, **engine_options) -> Conversation:
    settings = Settings()
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 4
    return Conversation(settings=settings, store=open_store(db),
                        engine=ChatEngine(tiny, **engine_options), model_spec="tiny")


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


def test_a_turn_stopped_before_its_first_token_shows_no_time_to_it(tiny, tmp_path):
    conv = make(tiny, tmp_path / "a.db", chunk_seconds=0.0)  # chunks of 16 tokens
    done = None
    for event in conv.turns.send("word " * 300):
        if isinstance(event, PrefillProgress) and event.done > 0:
            conv.engine.cancel()
        elif isinstance(event, TurnDone):
            done = event
    assert done.stats.generated_tokens == 0 and done.stats.finish_reason == "cancelled"
    assert done.stats.first_token_s is None  # was "ttft 0 ms"
    line = markdown_stats_line(done.stats, cancelled=True)
    assert "ttft" not in line and line.endswith("· stopped_")  # the chat's word
    conv.close()


def test_a_first_message_typed_ahead_is_said_prefilled_while_typing(tiny, tmp_path):
    conv = make(tiny, tmp_path / "a.db")
    typed = [conv.typing.prefill_typed(MESSAGE[:i]) for i in range(1, len(MESSAGE) + 1)][-1]
    assert typed > 0 and conv.views.state().cache_source == "typed"  # not "cold start"
    done = last(conv.turns.send(MESSAGE))
    assert done.stats.reused_tokens == done.stats.typed_prefill_tokens == typed
    assert done.stats.cache_source == "typed"
    assert done.stats.source_words == "prefilled while typing"
    assert last(conv.turns.send("And then?")).stats.cache_source == "warm"
    conv.close()


def test_a_new_conversation_is_said_as_one_and_an_edit_as_a_miss(tiny, tmp_path):
    conv = make(tiny, tmp_path / "a.db")
    last(conv.turns.send("Hello there."))
    conv.new_session()
    first = last(conv.turns.send("Something else entirely."))
    assert first.stats.reused_tokens > 0  # the template's opening
    assert first.stats.miss_reason == NEW_CONVERSATION and first.stats.new_conversation
    assert first.stats.miss_words == NEW_CONVERSATION  # no "miss:"
    edited = last(conv.turns.edit_last("Something different entirely."))
    assert edited.stats.miss_reason.startswith("the first message differs")
    assert edited.stats.miss_words.startswith("miss: ") and not edited.stats.new_conversation
    conv.close()
