"""A reply the request begins (assistant prefill): the model continues the
given text, the reply is stored whole (the text, then what the model wrote;
its ids in the token ledger), and the next turn reuses every token of it."""

from __future__ import annotations

from mlxchat.engine.events import ChoiceDone, TextDelta, TurnDone
from mlxchat.engine.turn.reply_options import ReplyOptions

from tests.session.test_conversation import last, make

PREFILL = '{"answer": "'


def test_the_model_continues_the_given_text(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    conv.turns.prefill = PREFILL
    events = list(conv.turns.send("Answer in JSON."))
    done = last(events)
    said = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert said == done.reply and done.reply  # only the continuation is said
    stored = conv.messages[-1]
    assert stored.role == "assistant" and stored.content == PREFILL + done.reply
    # The prompt was the user's ids, then the open reply's; the stored reply's
    # ids are those, then the sampled ones.
    user = conv.messages[-2]
    begun = stored.token_ids[:len(stored.token_ids) - len(done.token_ids)]
    assert stored.token_ids[len(begun):] == done.token_ids
    assert tiny.tokenizer.decode(begun).endswith(PREFILL)
    assert done.stats.prompt_tokens == len(user.token_ids) + len(begun)
    assert conv.turns.prefill is None  # taken by the send

    follow = last(conv.turns.send("And again?"))
    # Only the new message is computed: the prefill and the reply came from the cache.
    assert follow.stats.miss_reason is None and follow.stats.cache_source == "warm"
    assert follow.stats.prefilled_tokens == len(conv.messages[-2].token_ids)
    conv.close()


def test_the_prefill_changes_the_reply(tiny, tmp_path):
    plain = make(tiny, tmp_path / "a.db")
    without = last(plain.turns.send("Answer in JSON."))
    plain.close()
    begun = make(tiny, tmp_path / "b.db")
    begun.turns.prefill = PREFILL
    with_it = last(begun.turns.send("Answer in JSON."))
    begun.close()
    assert with_it.stats.prompt_tokens > without.stats.prompt_tokens


def test_only_the_first_choice_is_stored(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    conv.turns.options = ReplyOptions(choices=3)
    events = list(conv.turns.send("Hello."))
    done = last(events)
    others = [e for e in events if isinstance(e, ChoiceDone)]
    assert len(others) == 2 and isinstance(events[-1], TurnDone)
    assert conv.messages[-1].content == done.reply
    assert [m.role for m in conv.messages] == ["user", "assistant"]
    conv.close()
