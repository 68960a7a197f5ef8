"""Prefill while the user types: the same reply as a plain send, honest stats,
and an edit earlier in the text trims the cache back to it."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

from mlxchat.chat import Attachment
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.session.typing_ahead import settled_text
from mlxchat.store import open_store

MESSAGE = "Tell me about the rivers, the harvests and the people of the coast please"


def make(tiny, db: Path) -> Conversation:
    settings = Settings()
    settings.system_prompt = "Be brief."
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 8
    conv = Conversation(settings=settings, store=open_store(db), engine=ChatEngine(tiny),
                        model_spec="tiny")
    last(conv.turns.send("Hello there."))
    return conv


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


def type_out(conv: Conversation, text: str) -> list[int]:
    """Prefill after every keystroke, as a debounce firing each time would."""
    counts = [conv.typing.prefill_typed(text[:i]) for i in range(1, len(text) + 1)]
    assert conv.engine.cached_tokens == conv.typing.typed_tokens(text)
    return counts


def test_settled_text_stops_at_the_last_whitespace():
    assert settled_text("one two thr") == "one two"
    assert settled_text("one two  \n") == "one two"
    assert settled_text("single") == ""


def test_typing_prefill_gives_the_same_reply_as_a_plain_send(tiny, tmp_path):
    typed, plain = make(tiny, tmp_path / "a.db"), make(tiny, tmp_path / "b.db")
    history = len(typed.engine.cached_tokens)
    counts = type_out(typed, MESSAGE)
    assert counts[-1] > 0 and counts == sorted(counts)  # grows word by word
    assert history + counts[-1] == len(typed.engine.cached_tokens)
    a, b = last(typed.turns.send(MESSAGE)), last(plain.turns.send(MESSAGE))
    assert a.reply == b.reply and a.token_ids == b.token_ids
    assert a.stats.prompt_tokens == b.stats.prompt_tokens
    # The turn reports only what it prefilled itself; typing prefill apart.
    assert a.stats.typed_prefill_tokens == counts[-1]
    assert a.stats.prefilled_tokens + a.stats.typed_prefill_tokens == b.stats.prefilled_tokens
    assert a.stats.typed_prefill_s > 0 and b.stats.typed_prefill_tokens == 0
    assert a.stats.miss_reason is None
    # The stored message's ids start with what was prefilled while typing.
    sent = typed.messages[-2].token_ids
    assert sent[:counts[-1]] == typed.engine.cached_tokens[history:history + counts[-1]]
    typed.close()
    plain.close()


def test_an_edit_in_the_middle_trims_back_to_the_edit(tiny, tmp_path):
    conv, plain = make(tiny, tmp_path / "a.db"), make(tiny, tmp_path / "b.db")
    type_out(conv, MESSAGE)
    before = conv.engine.cached_tokens
    edited = MESSAGE.replace("harvests", "fishermen")
    after = conv.typing.typed_tokens(edited)
    count = conv.typing.prefill_typed(edited)
    assert conv.engine.cached_tokens == after
    keep = next(i for i, (x, y) in enumerate(zip(before, after)) if x != y)
    assert before[:keep] == after[:keep] and keep < len(before)
    assert count == len(after) - len(plain.engine.cached_tokens)
    a, b = last(conv.turns.send(edited)), last(plain.turns.send(edited))
    assert a.reply == b.reply and a.stats.miss_reason is None
    conv.close()
    plain.close()


def test_no_typing_prefill_when_history_follows_the_template(tiny, tmp_path):
    conv = make(tiny, tmp_path / "a.db")
    conv.update_generation(dataclasses.replace(conv.generation, history="template"))
    cached = conv.engine.cached_tokens
    assert conv.typing.prefill_typed(MESSAGE) == 0
    assert conv.engine.cached_tokens == cached
    conv.close()


def test_a_prefill_planned_before_a_turn_never_trims_its_reply(tiny, tmp_path, monkeypatch):
    conv = make(tiny, tmp_path / "a.db")
    prefill, after_send = conv.engine.prefill, []

    def late(tokens, settings, **options):  # the send runs after the prefill was planned
        last(conv.turns.send("Something else first."))
        after_send.append(conv.engine.cached_tokens)
        return prefill(tokens, settings, **options)
    monkeypatch.setattr(conv.engine, "prefill", late)
    assert conv.typing.prefill_typed(MESSAGE) == 0
    monkeypatch.undo()
    cached = conv.engine.cached_tokens
    assert cached == after_send[0]  # the new message and reply are still there
    a = last(conv.turns.send("And then?"))
    assert a.stats.reused_tokens == len(cached) and a.stats.miss_reason is None
    conv.close()


def test_after_an_undo_typing_prefill_trims_the_undone_message(tiny, tmp_path):
    conv, plain = make(tiny, tmp_path / "a.db"), make(tiny, tmp_path / "b.db")
    last(conv.turns.send("An answer I will take back."))
    conv.turns.undo()
    count = conv.typing.prefill_typed(MESSAGE)
    assert count > 0 and conv.engine.cached_tokens == conv.typing.typed_tokens(MESSAGE)
    a, b = last(conv.turns.send(MESSAGE)), last(plain.turns.send(MESSAGE))
    assert a.reply == b.reply and a.stats.typed_prefill_tokens == count
    conv.close()
    plain.close()


def test_an_attachment_prefills_before_anything_is_typed(tiny, tmp_path):
    conv = make(tiny, tmp_path / "a.db")
    text = "The river floods every spring and the fields are rich.\n"
    conv.turns.attachments.append(Attachment(tmp_path / "note.txt", text, len(text)))
    cached = len(conv.engine.cached_tokens)
    count = conv.typing.prefill_typed("")
    assert count > len(text) // 4 and len(conv.engine.cached_tokens) == cached + count
    a = last(conv.turns.send("What floods?"))
    assert a.stats.typed_prefill_tokens == count and a.stats.miss_reason is None
    conv.close()


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, condition
        time.sleep(0.001)


def test_a_send_supersedes_a_waiting_typing_prefill(tiny, tmp_path):
    conv, plain = make(tiny, tmp_path / "a.db"), make(tiny, tmp_path / "b.db")
    engine = conv.engine
    gate = threading.Event()
    engine._worker.later(gate.wait)  # noqa: SLF001 - the engine thread is busy until it opens
    counted: list[int] = []
    typing = threading.Thread(target=lambda: counted.append(conv.typing.prefill_typed(MESSAGE)))
    typing.start()
    wait_for(lambda: engine._typing.current is not None)  # noqa: SLF001
    waiting = engine._typing.current  # noqa: SLF001
    reply: list[TurnDone] = []
    sending = threading.Thread(target=lambda: reply.append(last(conv.turns.send(MESSAGE))))
    sending.start()
    wait_for(waiting.is_set)  # the send superseded it before it ran
    gate.set()
    typing.join(30)
    sending.join(30)
    assert counted == [0]
    b = last(plain.turns.send(MESSAGE))
    assert reply[0].reply == b.reply and reply[0].stats.typed_prefill_tokens == 0
    assert reply[0].stats.prefilled_tokens == b.stats.prefilled_tokens
    conv.close()
    plain.close()
