"""/retry /edit /undo /system /attach /copy."""

from __future__ import annotations

from mlxchat.commands.turns import code_blocks, kv_sizer
from mlxchat.engine.turn.prefill_cost import fit
from mlxchat.session.views import decode_step
from mlxchat.units import fmt_seconds

from tests.commands.conftest import SYSTEM, finish, send


def test_retry_keeps_the_old_reply_on_a_branch(registry, ctx, conv):
    send(conv, "Say something")
    first_reply = conv.messages[-1].id
    result = registry.run("/retry", ctx)
    assert result.ok and result.session_changed
    done = finish(result)
    assert done.stats.generated_tokens > 0
    assert conv.messages[-1].id != first_reply
    assert first_reply in {b.leaf_id for b in conv.store.branches.of(conv.session.id)}


def test_retry_edit_undo_on_an_empty_session(registry, ctx):
    assert registry.run("/retry", ctx).text == "Nothing to retry yet."
    assert registry.run("/edit new text", ctx).text == "There is no message to edit yet."
    assert registry.run("/edit", ctx).text == "There is no message to edit yet."
    assert registry.run("/undo", ctx).text == "Nothing to undo."


def test_edit_without_text_prefills_the_input(registry, ctx, conv):
    send(conv, "Original wording\nwith two lines")
    result = registry.run("/edit", ctx)
    assert result.ok and result.turn is None
    assert result.prefill_input == "/edit Original wording\nwith two lines"


def test_edit_answers_the_new_text_on_a_new_branch(registry, ctx, conv):
    send(conv, "Original wording")
    result = registry.run("/edit Better wording", ctx)
    assert result.session_changed and result.clear_input
    finish(result)
    assert [m.role for m in conv.messages] == ["user", "assistant"]
    assert conv.messages[0].content == "Better wording"
    assert len(conv.store.branches.of(conv.session.id)) == 2


def test_edit_that_cannot_fit_is_refused_before_it_is_stored(registry, ctx, conv):
    send(conv, "Short")
    registry.run("/set context_policy stop", ctx)
    result = registry.run("/edit " + "x" * 3000, ctx)
    assert result.kind == "error" and "context window" in result.text
    assert conv.messages[0].content == "Short"


def test_undo(registry, ctx, conv):
    send(conv, "One")
    send(conv, "Two")
    result = registry.run("/undo", ctx)
    assert result.ok and result.session_changed and "2 messages" in result.text
    assert next(m.content for m in conv.messages) == "One" and len(conv.messages) == 2


def test_system_show_set_clear(registry, ctx, conv):
    shown = registry.run("/system", ctx)
    assert shown.ok and SYSTEM in shown.text and "tokens" in shown.text
    assert registry.run("/system Answer in French.", ctx).session_changed
    assert conv.session.system_prompt == "Answer in French."
    assert registry.run("/system --clear", ctx).ok
    assert conv.session.system_prompt is None
    assert "No system prompt" in registry.run("/system", ctx).text
    assert registry.run("/system --clear now", ctx).kind == "error"


def test_attach_reports_its_cost_then_goes_with_the_next_message(registry, ctx, conv,
                                                                  tmp_path):
    notes = tmp_path / "work" / "notes.txt"
    notes.write_text("The meeting is on Tuesday.\n" * 10)
    first = registry.run("/attach notes.txt", ctx)
    assert first.ok, first.text
    assert "measured on a two-token cache" in first.text
    assert "unknown until the first turn" in first.text
    assert conv.turns.attachments[0].tokens > 270  # byte-level tokenizer: about one per byte
    send(conv, "When is the meeting?")
    assert "The meeting is on Tuesday." in conv.messages[0].content
    assert conv.session.title == "When is the meeting?"  # the typed text, not the file
    assert conv.turns.attachments == []
    again = registry.run(f"/attach {notes}", ctx)
    assert "measured from the live cache" in again.text
    # The prefill estimate: the chunks the turn measured, fitted with its decode
    # step as a pass's cost, at the depth the file goes to (after the conversation).
    tokens = conv.turns.attachments[0].tokens
    start = conv.views.context_window - conv.views.window_left()
    chunks = conv.engine.prefill_chunks(conv.generation.kv_bits)
    cost = fit(chunks, step=decode_step([conv.turns.last_stats]))
    seconds, spread = cost.seconds(tokens, start), fit(chunks).seconds(tokens, start)
    if cost.per_pass and spread > 1.25 * seconds:  # short chunks: the range they allow
        assert (f"between {fmt_seconds(seconds)} and {fmt_seconds(spread)} to prefill ("
                in again.text) and "from short chunks)" in again.text
    else:
        assert f"~{fmt_seconds(seconds)} to prefill (" in again.text
    assert "; measured on this model" in again.text
    assert "% of the 2,048-token window" in again.text
    assert registry.run("/attach notes.txt", ctx).text.startswith("notes.txt is attached")
    assert "notes.txt" in registry.run("/attach", ctx).text
    cleared = registry.run("/attach --clear", ctx)
    assert cleared.text == "Dropped 1 pending attachment." and conv.turns.attachments == []


def test_kv_probe_on_an_empty_cache_matches_the_live_cache(ctx, conv):
    estimated, how = kv_sizer(ctx)
    assert how.startswith("measured on a two-token cache")
    send(conv, "Fill the cache a little")
    measured, how = kv_sizer(ctx)
    assert how.startswith("measured") and measured(100) == estimated(100)


def test_attach_refusals(registry, ctx, conv, tmp_path):
    work = tmp_path / "work"
    (work / "image.bin").write_bytes(b"\x89PNG\0\0\x01")
    (work / "latin1.txt").write_bytes("café".encode("latin-1"))
    (work / "big.bin").write_bytes(b"\x7fELF\x02\x01\x01\0" + bytes(range(256)) * 800)  # 200 KB
    (work / "big-latin1.txt").write_bytes("café ".encode("latin-1") * 40_000)
    (work / "empty.txt").write_text("")
    (work / "folder").mkdir()
    (work / "huge.txt").write_text("y" * 3000)  # ~3,000 tokens > the 2,048 window
    (work / "enormous.txt").write_text("z" * 200_000)
    expected = {
        "image.bin": "looks binary", "latin1.txt": "is not UTF-8 text",
        "big.bin": "looks binary", "big-latin1.txt": "is not UTF-8 text",  # at any size
        "empty.txt": "is empty", "folder": "is a folder", "missing.txt": "No such file",
        "huge.txt": "tokens; only", "enormous.txt": "too large",
    }
    for name, words in expected.items():
        result = registry.run(f"/attach {name}", ctx)
        assert result.kind == "error" and words in result.text, (name, result.text)
        assert "\n" not in result.text
    assert conv.turns.attachments == []


def test_code_blocks():
    reply = ("Here:\n```python\nprint(1)\n```\ntext\n~~~\nplain\n~~~\n"
             "````md\n```inner```\n````\n```sh\nunclosed")
    assert code_blocks(reply) == [("python", "print(1)"), ("", "plain"),
                                  ("md", "```inner```"), ("sh", "unclosed")]
    assert code_blocks("no code") == []


def _store_reply(conv, text: str) -> None:
    conv.store.add_message(conv.session.id, "user", "Show me code")
    conv.store.add_message(conv.session.id, "assistant", text)
    conv.reload()


def test_copy_reply_and_code_blocks(registry, ctx, conv, copied):
    _store_reply(conv, "Two ways:\n```python\nprint(1)\n```\nor\n```sh\necho 1\n```")
    assert registry.run("/copy", ctx).ok and copied[-1].startswith("Two ways:")
    result = registry.run("/copy 2", ctx)
    assert copied[-1] == "echo 1" and "code block 2 of 2 (sh)" in result.text
    assert registry.run("/copy 3", ctx).text == "The last reply has 2 code blocks; choose 1 to 2."
    assert "not a code block number" in registry.run("/copy -1", ctx).text
    assert len(copied) == 2


def test_copy_without_a_clipboard(registry, ctx, conv, monkeypatch):
    _store_reply(conv, "plain text")
    ctx.clipboard = None
    monkeypatch.setenv("PATH", "")
    result = registry.run("/copy", ctx)
    assert result.kind == "error" and result.text.startswith("No clipboard here")


def test_copy_before_any_reply(registry, ctx):
    assert registry.run("/copy", ctx).text == "There is no reply to copy yet."


def test_kv_probe_is_measured_at_the_session_kv_bits(registry, ctx, conv, tiny_b):
    # tiny_b's head size (64) lets its cache be quantized: 8-bit takes fewer bytes.
    assert registry.run("/model tiny-b", ctx).ok
    full, _ = kv_sizer(ctx)
    assert registry.run("/set kv_bits 8", ctx).ok
    eight, how = kv_sizer(ctx)
    assert how.startswith("measured") and 0 < eight(1) < full(1)
    send(conv, "Fill the cache a little")
    live, how = kv_sizer(ctx)
    assert how == "measured from the live cache" and live(1) == eight(1)


def test_a_forecast_from_short_chunks_is_said_as_a_range(ctx, conv, monkeypatch):
    from mlxchat.commands.base import prefill_words
    from mlxchat.engine.turn.prefill_cost import PrefillCost
    from mlxchat.session.views import PrefillEstimate

    short = PrefillEstimate(35.0, 100, PrefillCost(0.01, 0.0, 4, per_pass=0.02), True,
                            spread_over_tokens=83.0)
    monkeypatch.setattr(conv.views, "prefill_estimate", lambda tokens, after=0: short)
    text = prefill_words(ctx, 3000)
    assert text.startswith("between 35.00 s and 1 min 23 s to prefill (")
    assert text.endswith("measured on this model, from short chunks)")
    one = PrefillEstimate(35.0, 100, PrefillCost(0.01, 0.0, 40), True)
    monkeypatch.setattr(conv.views, "prefill_estimate", lambda tokens, after=0: one)
    assert prefill_words(ctx, 3000).startswith("~35.00 s to prefill (")
