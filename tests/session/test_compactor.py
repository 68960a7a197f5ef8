"""A conversation longer than its window, compacted: the compaction prepared
in idle time once the branch passes the threshold (never during a turn), the
switch prefilling only the new message, the compacted conversation the same
reply warm, resumed from disk and cold, /compact undo exact, and a message
that overflows before the preparation is done waiting for it."""

from __future__ import annotations

import threading

from mlxchat.chat import model_view
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.generation import GenerationSettings

from tests.session.compacting import fill, last, make, question, settled, until_switch
from tests.waiting import until


def test_the_threshold_starts_the_preparation_after_a_turn_never_during_it(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    i = 0
    while not conv.compactor.due():
        assert conv.compactor.status().state == "waiting"
        fill(conv, 1, i)
        i += 1
    # Past the threshold now: a turn in flight starts nothing...
    conv.compactor.forget()
    turn = conv.turns.send(question(i))
    for event in turn:
        if isinstance(event, TextDelta):
            assert conv.compactor.status().state == "waiting"
            assert conv.engine.prepared.held() == []
    # ...its end does, and the preparation ends with a summary and the
    # compacted conversation prefilled into the second cache.
    assert settled(conv) == "ready"
    status = conv.compactor.status()
    assert status.summary_tokens > 0 and status.threshold == 768 * 50 // 100
    assert len(conv.engine.prepared.held()) > 0
    conv.close(compact=False)


def test_the_switch_prefills_only_the_new_message(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    done, _ = until_switch(conv)
    assert done.stats.compaction.startswith("compacted: ")
    assert done.stats.compaction.endswith("(prepared ahead)")
    user = conv.messages[-2]
    assert done.stats.prefilled_tokens == len(user.token_ids)
    assert done.stats.miss_reason is None and done.stats.dropped_messages == 0
    summary = conv.messages[-3]
    assert summary.role == "summary" and summary.ledger_start
    assert summary.compaction.summarized > 0 and summary.compaction.kept >= 2
    # Nothing was deleted: every message stays on the branch, the summary among them.
    stored = conv.store.all_messages(conv.session.id)
    assert [m.id for m in conv.messages] == [m.id for m in stored]
    conv.close(compact=False)


def test_warm_resumed_and_cold_give_the_same_reply(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    _, nxt = until_switch(conv)
    sid = conv.session.id
    follow = question(nxt)
    branch = conv.messages
    warm = last(conv.turns.send(follow))
    conv.turns.undo()
    conv.close(compact=False)
    # Resumed: a new process's conversation restores the compacted ledger's files.
    again = make(tiny, tmp_path / "s.db", ahead=False)
    again.open_session(sid)
    assert again.messages == branch
    assert again.cache.last_load.ok and again.cache.last_load.tokens > 0
    resumed = last(again.turns.send(follow))
    assert resumed.stats.cache_source == "snapshot" and resumed.stats.miss_reason is None
    assert resumed.token_ids == warm.token_ids
    # Cold: the stored ledger, prefilled from nothing on a fresh engine.
    prompt = again.ledger(again.engine).plan_message(branch, follow).prompt
    engine = ChatEngine(tiny)
    cold = [e for e in engine.turn(FittedPrompt(prompt.tokens, prompt.messages, 0, ledger=True),
                                   GenerationSettings(temperature=0.0, max_tokens=8))
            if isinstance(e, TurnDone)][-1]
    assert cold.stats.cache_source == "cold" and cold.token_ids == warm.token_ids
    engine.close()
    again.close(compact=False)


def test_undo_returns_to_the_branch_exactly(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db", policy="drop_oldest")
    fill(conv, 5)
    source, copy = conv.fork()  # the same branch, never compacted
    reference = last(conv.turns.send("And one more thing?"))
    conv.open_session(source.id)
    switched = conv.compactor.compact()
    assert switched.compaction.trigger == "manual" and switched.held == switched.tokens
    compacted = conv.messages
    assert compacted[-1].role == "summary"
    assert len(model_view(compacted)) < len(compacted) - 1
    record, later = conv.compactor.undo()
    assert record == switched.compaction and later == 0
    assert conv.messages == compacted[:-1]
    assert conv.cache.last_load.ok and conv.cache.last_load.tokens > 0  # from disk
    after = last(conv.turns.send("And one more thing?"))
    assert after.stats.cache_source == "snapshot" and after.stats.miss_reason is None
    assert after.token_ids == reference.token_ids
    conv.close(compact=False)


def _under_way(conv) -> None:
    """A preparation started and given way before its summary's first token
    (other work was queued on the engine): under way, nothing written."""
    worker, held, gate = conv.engine._worker, threading.Event(), threading.Event()
    worker.later(lambda: (held.set(), gate.wait(30)))
    held.wait(30)
    step = threading.Thread(target=conv.compactor.step)
    step.start()
    until(worker.others_waiting)  # the preparation's job, in line behind the held one
    behind = worker.later(lambda: None)
    gate.set()
    step.join(30)
    behind.result(30)


def test_a_message_sent_while_the_summary_is_being_written_waits_for_it(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db", ahead=False)
    i = 0
    while True:  # until the next message overflows the window
        plan = conv.ledger(conv.engine).plan_message(conv.messages, question(i))
        if plan.overflow:
            break
        last(conv.turns.send(question(i)))
        i += 1
    _under_way(conv)
    assert conv.compactor.status().state == "waiting" and conv.compactor._prep.summary is None
    conv.compactor.ahead = True
    done = last(conv.turns.send(question(i)))
    # Finishing the summary costs less than prefilling nearly the whole window again.
    assert done.stats.compaction.startswith("compacted: ")
    assert done.stats.dropped_messages == 0 and done.stats.miss_reason is None
    assert [m.role for m in conv.messages].count("summary") == 1
    assert done.stats.prefilled_tokens == len(conv.messages[-2].token_ids)
    conv.close(compact=False)


def test_a_message_past_the_window_with_nothing_prepared_waits_for_the_compaction(
        tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db", compact_at=95)  # past 95%: no idle time at all
    done, _ = until_switch(conv)
    assert done.stats.compaction.endswith("(prepared in this turn)")
    assert done.stats.dropped_messages == 0
    conv.close(compact=False)


def test_without_idle_time_the_overflowing_message_waits_for_the_compaction(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db", ahead=False)
    done, _ = until_switch(conv)
    assert done.stats.compaction.endswith("(prepared in this turn)")
    assert done.stats.dropped_messages == 0 and conv.messages[-3].role == "summary"
    conv.close(compact=False)


def test_nothing_to_compact_is_refused_and_changes_nothing(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    last(conv.turns.send("Hello."))
    before = conv.messages
    try:
        conv.compactor.compact()
    except Exception as exc:  # noqa: BLE001 - the one line is what the user sees
        assert str(exc).startswith("Nothing to compact: ") and "\n" not in str(exc)
    else:
        raise AssertionError("a one-exchange conversation was compacted")
    assert conv.messages == before
    try:
        conv.compactor.undo()
    except Exception as exc:  # noqa: BLE001
        assert "nothing to undo" in str(exc)
    conv.close(compact=False)


def test_a_compaction_whose_kept_messages_leave_no_room_is_compacted_again(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    i = 0
    while settled(conv) != "ready":
        fill(conv, 1, i)
        i += 1
    conv.compactor.ahead = False  # the preparation stays as it was: later messages are kept
    while not conv.ledger(conv.engine).plan_message(conv.messages, question(i)).overflow:
        last(conv.turns.send(question(i)))
        i += 1
    # A message past the window that the messages kept since leave no room for.
    long = "Now a long one: " + "tell me everything about every topic so far. " * 6
    done = last(conv.turns.send(long))
    notes = done.stats.compaction.split("; ")
    assert len(notes) == 2 and all(n.startswith("compacted: ") for n in notes), notes
    assert done.stats.dropped_messages == 0 and done.stats.miss_reason is None
    assert [m.role for m in conv.messages].count("summary") == 2
    assert done.stats.prefilled_tokens < done.stats.context_used
    conv.close(compact=False)
