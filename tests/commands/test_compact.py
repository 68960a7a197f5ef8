"""/compact and /compact undo: a summary in place of the oldest messages, by
hand, undone exactly; bad input refused in one line; every original message
kept in the exports."""

from __future__ import annotations

import json

from mlxchat.chat import model_view
from mlxchat.store.export import session_document, session_markdown

from tests.commands.conftest import send

QUESTIONS = [f"Question {i}: what about the river number {i}?" for i in range(6)]


def test_compact_then_undo(registry, ctx, conv):
    for q in QUESTIONS:
        send(conv, q)
    before = conv.messages
    result = registry.run("/compact", ctx)
    assert result.ok and result.text.startswith("Compacted: ") and result.session_changed
    summary = conv.messages[-1]
    assert summary.role == "summary" and summary.compaction.trigger == "manual"
    assert conv.messages[:-1] == before  # nothing deleted
    view = model_view(conv.messages)
    assert view[0].content.startswith("<summary of the earlier conversation>\n")
    assert len(view) == summary.compaction.kept < len(before)
    undone = registry.run("/compact undo", ctx)
    assert undone.ok and "back in the model's view" in undone.text
    assert conv.messages == before


def test_compact_refuses_bad_input_and_nothing_to_do(registry, ctx, conv):
    assert registry.run("/compact later", ctx).text == "Usage: /compact [undo]"
    short = registry.run("/compact", ctx)
    assert short.kind == "error" and short.text.startswith("Nothing to compact: ")
    undo = registry.run("/compact undo", ctx)
    assert undo.kind == "error" and "nothing to undo" in undo.text
    assert conv.messages == []


def test_exports_keep_every_original_message_and_the_summary(registry, ctx, conv):
    for q in QUESTIONS:
        send(conv, q)
    originals = [m.content for m in conv.messages]
    assert registry.run("/compact", ctx).ok
    send(conv, "And after the summary?")
    session = conv.store.get_session(conv.session.id)
    markdown = session_markdown(session)
    for text in originals:
        assert text.strip() in markdown
    assert "### Summary (" in markdown and "messages summarized in" in markdown
    document = session_document(conv.store, conv.session.id)
    rows = document["messages"]
    assert [r["content"] for r in rows if r["role"] in ("user", "assistant")][:len(originals)] \
        == originals
    [summary] = [r for r in rows if r["role"] == "summary"]
    assert summary["compaction"]["kept"] >= 2
    # The JSON export imports back with its summary, which the model sees again.
    from mlxchat.store.importing import import_json

    copy = import_json(conv.store, json.dumps(document))
    assert [m.role for m in copy.messages] == [m.role for m in conv.messages]
    assert model_view(copy.messages)[0].content == model_view(conv.messages)[0].content
