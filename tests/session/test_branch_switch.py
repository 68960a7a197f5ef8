"""Back on another branch, a follow-up reuses that branch's own saved KV: its
segments are restored when the live cache (left holding the other branch)
shares much less of the prompt than they cover, and only the new message is
prefilled. A branch the live cache already holds is never re-read."""

from __future__ import annotations

from tests.session.test_compaction import last, make

QUESTIONS = ("One.", "Two?", "Three! Tell me about rivers and the sea.")


def test_a_follow_up_on_a_branch_switched_back_to_prefills_only_its_new_message(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    last(conv.turns.send(QUESTIONS[0]))
    last(conv.turns.send(QUESTIONS[1]))
    first = last(conv.turns.send(QUESTIONS[2]))
    first_leaf, held = conv.session.leaf_id, first.stats.context_used
    # A second branch, diverging early: the live cache now holds it.
    last(conv.turns.edit_last("Three?"))
    last(conv.turns.send("And then?"))
    assert conv.views.state().cached_tokens != held

    conv.saved.switch_branch(first_leaf)
    nxt = last(conv.turns.send("Four."))
    assert nxt.stats.reused_tokens == held
    assert nxt.stats.prefilled_tokens == nxt.stats.prompt_tokens - held
    assert nxt.stats.cache_source == "snapshot"

    # The same ids as a conversation that never left the branch.
    warm = make(tiny, tmp_path / "w.db")
    for q in QUESTIONS:
        last(warm.turns.send(q))
    assert last(warm.turns.send("Four.")).token_ids == nxt.token_ids
    warm.close(compact=False)
    conv.close()


def test_a_retry_keeps_trimming_the_live_cache_rather_than_reading_the_disk(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    for q in QUESTIONS:
        last(conv.turns.send(q))
    prompt = conv.views.state().cached_tokens - conv.turns.last_stats.generated_tokens
    done = last(conv.turns.retry())
    assert done.stats.cache_source == "warm"
    assert done.stats.reused_tokens >= prompt - 1
    conv.close()
