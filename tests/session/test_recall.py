"""What left the window, recalled: a message brings back the passages of the
branch's earlier messages no longer in the model's view that match it (the
real all-MiniLM-L6-v2 embedder, BM25 beside it), numbered as sources and part
of its ledger; nothing when nothing matches, nothing with recall off; the
hidden collection never listed and gone with its session."""

from __future__ import annotations

import pytest

from mlxchat.sources import without_sources
from mlxchat.store.documents import CollectionNotFound

from tests.session.compacting import last, make

FACTS = ("My sister Ada lives in Lyon and works as a baker.",
         "Our trip starts on the 14th of May; we take the night train.",
         "The budget for the whole week is 900 euros.",
         "Pack the blue tent, not the green one: its pole is broken.")


def _compacted(tiny, db, **kw):
    conv = make(tiny, db, ahead=False, recall=True, **kw)
    for fact in FACTS:
        last(conv.turns.send(fact))
    last(conv.turns.send("Now something else entirely."))
    conv.compactor.compact()
    return conv


def test_a_question_brings_back_the_message_that_answers_it(tiny, tmp_path):
    conv = _compacted(tiny, tmp_path / "s.db")
    gone = conv.recall.gone()
    assert [m.content for m in gone if m.role == "user"] == list(FACTS)
    done = last(conv.turns.send("Where does Ada live?"))
    recalled = conv.recall.last
    ada = next(m for m in gone if m.content == FACTS[0])
    assert recalled and conv.recall.message_id(recalled[0]) == ada.id
    assert recalled[0].text == FACTS[0] and recalled[0].n == 1 and recalled[0].tokens > 0
    sent = conv.messages[-2]
    assert sent.sources == recalled  # stored with the message: never recalled again
    assert sent.content.startswith('<sources collection="earlier in this conversation">')
    assert without_sources(sent.content) == "Where does Ada live?"
    assert FACTS[0] in conv.engine.loaded.tokenizer.decode(sent.token_ids)  # in its ledger
    assert done.stats.prompt_tokens > len(sent.token_ids)
    conv.close(compact=False)


def test_nothing_comes_back_when_nothing_matches_or_recall_is_off(tiny, tmp_path):
    conv = _compacted(tiny, tmp_path / "s.db")
    last(conv.turns.send("Thanks. One more word?"))
    assert conv.recall.last == [] and conv.messages[-2].sources is None
    conv.change_generation(recall=False)
    last(conv.turns.send("How much can we spend on the trip?"))
    assert conv.recall.last == [] and conv.messages[-2].content.startswith("How much")
    conv.change_generation(recall=True)
    last(conv.turns.send("How much can we spend on the trip?"))
    assert [s.text for s in conv.recall.last][:1] == [FACTS[2]]
    conv.close(compact=False)


def test_a_turn_of_messages_after_a_recall_reports_none_of_it(tiny, tmp_path):
    from mlxchat.chat import Message

    conv = _compacted(tiny, tmp_path / "s.db")
    last(conv.turns.send("Where does Ada live?"))
    assert conv.recall.report()  # what the server's reply lists under 'recalled'
    last(conv.turns.send_turn([Message("user", "Thanks.")]))
    assert conv.recall.report() == []
    conv.close(compact=False)


def test_what_drop_oldest_left_out_is_recalled_too(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db", policy="drop_oldest", recall=True)
    for fact in FACTS:
        last(conv.turns.send(fact))
    i = 0
    while not conv.recall.gone():  # until a turn leaves the oldest out
        last(conv.turns.send(f"Filler {i}: tell me about topic {i * 7}."))
        i += 1
    assert conv.recall.gone()[0].content == FACTS[0]
    last(conv.turns.send("Where does my sister Ada live?"))
    assert [s.text for s in conv.recall.last][:1] == [FACTS[0]]
    conv.close(compact=False)


def test_the_hidden_collection_is_never_listed_and_goes_with_its_session(tiny, tmp_path):
    conv = _compacted(tiny, tmp_path / "s.db")
    last(conv.turns.send("Where does Ada live?"))
    sid = conv.session.id
    assert conv.retrieval.collections() == []
    docs = conv.store.documents
    assert docs.get(f"~recall-{sid}").files == len(conv.recall.gone())
    conv.delete_session(sid)
    with pytest.raises(CollectionNotFound):
        docs.get(f"~recall-{sid}")
    conv.close(compact=False)
