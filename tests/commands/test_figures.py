"""/stats /cache /context."""

from __future__ import annotations

from dataclasses import replace

from mlxchat.chat import Message
from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.session.ledger import options_for

from tests.commands.conftest import SYSTEM, send
from tests.renders import spy_on_render


def test_stats(registry, ctx, conv):
    assert registry.run("/stats", ctx).text.startswith("No turn has ended yet")
    done = send(conv, "Measure this")
    result = registry.run("/stats", ctx)
    assert result.kind == "table" and result.text == "Last turn"
    rows = dict(result.rows)
    assert rows["prompt"].startswith(f"{done.stats.prompt_tokens} tokens: 0 reused (cold start)")
    assert rows["reply"].startswith(f"{done.stats.generated_tokens} tokens at")
    assert "tok/s" in rows["prefill speed"] and rows["KV cache"].endswith("full precision")


def test_stats_of_a_one_token_reply_say_no_rate_was_measured(registry, ctx, conv):
    conv.update_generation(replace(conv.generation, max_tokens=1))
    done = send(conv, "Measure this")
    assert done.stats.generated_tokens == 1
    rows = dict(registry.run("/stats", ctx).rows)
    assert rows["reply"] == "1 token, no rate from one token, stopped by max_tokens"
    assert rows["prefill speed"].endswith(" tok/s") and rows["prefill speed"][0].isdigit()
    conv.update_generation(replace(conv.generation, max_tokens=8))
    done = [e for e in conv.turns.retry() if isinstance(e, TurnDone)][0]
    assert done.stats.prefilled_tokens == 1  # the same prompt again: all of it cached
    rows = dict(registry.run("/stats", ctx).rows)
    assert rows["prefill speed"] == "not measured (nothing prefilled)"


def test_stats_of_a_reply_stopped_before_its_first_token(registry, ctx, conv):
    done = send(conv, "Measure this")
    conv.turns.last_stats = replace(done.stats, generated_tokens=0, finish_reason="cancelled")
    rows = dict(registry.run("/stats", ctx).rows)
    assert rows["reply"] == "no tokens, stopped by you"


def test_stats_say_in_words_that_you_stopped_the_reply(registry, ctx, conv):
    events = conv.turns.send("Tell me everything")
    for event in events:
        if isinstance(event, TextDelta):
            conv.turns.cancel()
    rows = dict(registry.run("/stats", ctx).rows)
    assert conv.turns.last_stats.finish_reason == "cancelled"
    assert rows["reply"].endswith(", stopped by you")


def test_stats_say_when_the_context_window_ended_the_reply(registry, ctx, conv):
    window = 256
    conv.update_generation(replace(conv.generation, context_window=window, max_tokens=window))
    text = "q"
    while conv.views.count_tokens([Message("system", SYSTEM), Message("user", text + "q")]) \
            <= window - 30:
        text += "q"
    done = send(conv, text)
    stats = done.stats
    assert stats.finish_reason == "length" and stats.generated_tokens < window
    assert stats.context_used == window == stats.prompt_tokens + stats.generated_tokens
    reply = dict(registry.run("/stats", ctx).rows)["reply"]
    assert reply.endswith(", stopped by the context window (full)")
    assert dict(registry.run("/stats", ctx).rows)["context"].startswith(
        f"{window:,} of {window:,} tokens")


def test_stats_after_reopening_come_from_the_stored_reply(registry, ctx, conv):
    send(conv, "Remember my stats")
    first = conv.session.id
    registry.run("/new", ctx)
    registry.run(f"/open {first}", ctx)
    result = registry.run("/stats", ctx)
    assert result.kind == "table" and "as stored" in result.text


def test_cache_report_save_and_drop(registry, ctx, conv, home):
    from mlxchat import paths

    empty = dict(registry.run("/cache", ctx).rows)
    assert empty["cached tokens"].startswith("0 of 2,048")
    assert empty["on disk"].startswith("nothing saved yet")
    assert registry.run("/cache save", ctx).text == "The KV cache is empty; nothing to save."
    send(conv, "Cache me")
    send(conv, "And again")
    rows = dict(registry.run("/cache", ctx).rows)
    state = conv.views.state()
    assert rows["cached tokens"].startswith(f"{state.cached_tokens} of 2,048")
    assert rows["KV cache"].endswith("fp32")
    assert rows["last turn"].endswith("prefilled") and "(warm cache)" in rows["last turn"]
    assert rows["miss reason"] == "none"
    assert rows["on disk"].startswith("2 KV segments of this branch")
    assert str(home) in rows["on disk"] and "FILE MISSING" not in rows["on disk"]
    saved = registry.run("/cache save", ctx)
    assert saved.ok and saved.text == (f"All {state.cached_tokens} tokens are on disk "
                                       "already (2 KV segments).")
    files = [paths.kv_file(r.path)
             for r in conv.store.segments.on_branch(conv.session.leaf_id)]
    assert len(files) == 2 and all(f is not None and f.exists() for f in files)
    dropped = registry.run("/cache drop", ctx)
    assert dropped.ok and dropped.session_changed
    assert conv.views.state().cached_tokens == 0 and not any(f.exists() for f in files)
    assert conv.store.segments.on_branch(conv.session.leaf_id) == []
    assert registry.run("/cache flush", ctx).text == "Usage: /cache [save|drop]"


def _row_tokens(result) -> list[int]:
    return [int(row[3].replace(",", "")) for row in result.rows]


def test_context_per_message(registry, ctx, conv, tmp_path, monkeypatch):
    renders = []
    real = spy_on_render(monkeypatch, lambda *a, **k: renders.append(1) or real(*a, **k))

    def renders_for_context() -> int:
        renders.clear()
        registry.run("/context", ctx)
        return len(renders)
    send(conv, "What fills the window?")
    after_one = renders_for_context()
    send(conv, "And then?")
    send(conv, "And after that?")
    # Read off the token ledger: each message's ids as sent, not re-rendered
    # prefix by prefix (so a longer branch costs no more renders).
    assert renders_for_context() <= after_one
    monkeypatch.undo()
    result = registry.run("/context", ctx)
    assert result.kind == "table"
    roles = [row[1] for row in result.rows]
    assert roles == ["system"] + ["user", "assistant"] * 3
    ledger = [len(m.token_ids) for m in conv.messages]
    tokens = _row_tokens(result)
    assert tokens[2:] == ledger[1:] and tokens[0] + tokens[1] == ledger[0]
    system = conv.engine.prompts.message_ids("x", system=SYSTEM, previous=None,
                                             options=options_for(conv.session))
    assert conv.messages[0].token_ids[:tokens[0]] == system[:tokens[0]] and tokens[0] > 0
    total = sum(tokens)
    assert result.text.startswith(f"{total} of 2,048 tokens")
    # Says what it counts, and how that differs from the cache (the Context gauge).
    assert "the next prompt" in result.text and "token ledger" in result.text
    cached = conv.views.state().cached_tokens
    assert f"the KV cache holds {cached:,}" in result.text
    assert result.rows[1][2] == "What fills the window?"


def test_context_without_a_ledger_renders_the_template(registry, ctx, conv, tmp_path):
    assert registry.run("/set history template", ctx).ok
    send(conv, "What fills the window?")
    result = registry.run("/context", ctx)
    roles = [row[1] for row in result.rows]
    assert roles == ["system", "user", "assistant", "template"]
    total = sum(_row_tokens(result))
    assert total == conv.engine.prompts.count_tokens(conv.engine_messages())
    assert result.text.startswith(f"{total} of 2,048 tokens")
    assert "generation prompt" in result.text
    cached = conv.views.state().cached_tokens
    assert cached != total and f"the KV cache holds {cached:,}" in result.text
    (tmp_path / "work" / "a.txt").write_text("attached text")
    registry.run("/attach a.txt", ctx)
    with_file = registry.run("/context", ctx)
    assert with_file.rows[-1][:3] == ("+", "attached", "a.txt")


def test_context_gives_the_templates_default_system_prompt_its_own_row(registry, ctx, conv):
    registry.run("/system --clear", ctx)
    send(conv, "What fills the window?")
    # The tiny template writes a default system prompt when the chat has none:
    # the rendering with that prompt given is the same, so its own tokens are
    # what the template put first.
    tokenizer = conv.engine.loaded.tokenizer
    default = "You are a helpful assistant."
    user = {"role": "user", "content": "What fills the window?"}
    assert tokenizer.apply_chat_template([user]) == tokenizer.apply_chat_template(
        [{"role": "system", "content": default}, user])
    opening = len(tokenizer.apply_chat_template([{"role": "system", "content": default}]))
    # The ledger holds the first message with the reply's opening; the
    # template's rendering counts it without.
    alone = len(tokenizer.apply_chat_template([user], add_generation_prompt=False))
    for history, first in (("ledger", len(conv.messages[0].token_ids)), ("template", alone)):
        assert registry.run(f"/set history {history}", ctx).ok
        result = registry.run("/context", ctx)
        rows = result.rows
        assert [row[1] for row in rows][:3] == ["system", "user", "assistant"]
        assert rows[0][0] == "" and default in rows[0][2] and "template" in rows[0][2]
        assert rows[1][:3] == ("1", "user", "What fills the window?")
        assert _row_tokens(result)[:2] == [opening, first - opening]
        assert result.text.startswith(f"{sum(_row_tokens(result))} of 2,048 tokens")


def test_context_of_an_empty_conversation(registry, ctx, conv):
    registry.run("/system --clear", ctx)
    assert registry.run("/context", ctx).text == "The conversation is empty: 0 of 2,048 tokens."
