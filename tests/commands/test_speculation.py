"""/draft and /set speculative|draft: the draft model is loaded through the
conversation, its cache follows the model's across turns and an edit, and
what cannot speculate is refused with the reason, nothing changed."""

from __future__ import annotations

import pytest

from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model

from tests.commands.conftest import make_conversation, send
from tests.families.builders import FAMILIES, write_family_model


@pytest.fixture(scope="module")
def tiny_d(tmp_path_factory):
    """Another random llama with the same tokenizer: a draft for ``tiny``."""
    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-d"), seed=1),
                       name="tiny-d", spec="tiny-d")


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    fam = next(f for f in FAMILIES if f.name == "gemma3")
    return load_folder(write_family_model(fam, tmp_path_factory.mktemp("gemma")),
                       name="gemma", spec="gemma")


def _replies(conv, draft_check=None):
    texts = ["Tell me about abc abc abc.", "More, please.", "Once more.", "And the end?"]
    out = []
    for i, text in enumerate(texts):
        if i == 2:
            out.append(_ids([e for e in conv.turns.edit_last("Edited: abc abc.")][-1]))
            draft_check and draft_check(out[-1])
        out.append(_ids(send(conv, text)))
        draft_check and draft_check(out[-1])
    return out


def _ids(done):
    return done.token_ids, done.stats


def test_draft_cache_follows_five_turns_with_an_edit(home, tmp_path, tiny, tiny_d, registry,
                                                     ctx):
    plain = make_conversation(tmp_path / "plain", tiny)
    (tmp_path / "spec").mkdir()
    (tmp_path / "plain").mkdir(exist_ok=True)
    expected = _replies(plain)
    plain.close()
    conv = make_conversation(tmp_path / "spec", tiny, tiny_d)
    ctx.conversation = conv
    result = registry.run("/set draft tiny-d", ctx)
    assert result.ok, result.text
    assert conv.generation.speculative == "draft" and conv.generation.draft == "tiny-d"

    def in_step(reply):
        held, drafted = conv.engine.cached_tokens, conv.engine.draft_cached_tokens
        assert drafted == held[:len(drafted)]  # the same tokens, a prefix of the model's
        assert len(drafted) >= reply[1].prompt_tokens  # the whole prompt at least
    got = _replies(conv, in_step)
    assert [ids for ids, _ in got] == [ids for ids, _ in expected]
    assert all(s.spec_mode == "draft" and s.draft_tokens_proposed for _, s in got)
    rows = dict(registry.run("/stats", ctx).rows)
    assert rows["speculative"].startswith("draft: ") and "per pass" in rows["speculative"]
    conv.close()


def test_refusals_change_nothing(home, tmp_path, tiny, gemma, registry, ctx, conv, shelf):
    shelf.add(gemma)
    before = conv.generation.to_dict()
    result = registry.run("/set draft gemma", ctx)
    assert not result.ok and "RotatingKVCache" in result.text
    result = registry.run("/set speculative draft", ctx)
    assert not result.ok and "/set draft" in result.text
    assert conv.generation.to_dict() == before
    assert not registry.run("/draft auto", ctx).ok  # tiny has no catalog pairing
    assert not registry.run("/set --default speculative lookup", ctx).ok


def test_switch_to_a_model_that_cannot_speculate_turns_it_off(home, tiny, gemma, registry,
                                                             ctx, conv, shelf):
    shelf.add(gemma)
    assert registry.run("/set speculative lookup", ctx).ok
    assert send(conv, "abc abc abc").stats.spec_mode == "lookup"
    result = registry.run("/model gemma", ctx)
    assert result.ok and "Speculative decoding is off" in result.text
    assert conv.generation.speculative == "off"
    assert send(conv, "hello").stats.spec_mode == "off"


def test_help_draft_explains_the_hardware(registry, ctx):
    text = registry.run("/help draft", ctx).text
    assert "verif" in text and "CPU" in text and "Apple" in text
    before = registry.run("/draft", ctx).text
    assert "auto" in before and "measured once after the first reply" in before
    assert "auto" in registry.run("/help draft", ctx).text


def test_auto_is_measured_after_a_reply_and_can_be_the_default(registry, ctx, conv):
    send(conv, "Tell me a story about a keeper and a lamp.")
    cost = conv.speculation.verify_cost()
    assert cost is not None and cost.proposed == conv.generation.draft_tokens
    shown = registry.run("/draft", ctx).text
    assert f"{cost.ratio:.1f} decode steps on this device" in shown
    assert ("prompt lookup is on" in shown) == cost.pays
    result = registry.run("/set speculative off --default", ctx)
    assert result.ok and conv.settings.generation.speculative == "off"
    assert conv.generation.speculative == "off"
    refused = registry.run("/set speculative lookup --default", ctx)
    assert not refused.ok and "per session" in refused.text
    assert conv.generation.speculative == "off"


def test_resume_reloads_the_draft_and_rebuilds_its_cache(home, tmp_path, tiny, tiny_d,
                                                          registry, ctx):
    plain = make_conversation(tmp_path / "plain", tiny)
    (tmp_path / "plain").mkdir(exist_ok=True)
    expected = [send(plain, "abc abc abc").token_ids, send(plain, "and more").token_ids]
    plain.close()
    conv = make_conversation(tmp_path, tiny, tiny_d)
    conv.speculation.set_draft("tiny-d")
    first = send(conv, "abc abc abc")
    sid = conv.session.id
    conv.close()
    conv.store.close()
    again = make_conversation(tmp_path, tiny, tiny_d)
    ctx.conversation = again
    assert registry.run(f"/open {sid}", ctx).ok
    assert again.generation.speculative == "draft" and again.speculation.draft_name() == "tiny-d"
    done = send(again, "and more")
    s = done.stats
    assert s.cache_source == "snapshot" and s.reused_tokens > 0
    assert s.draft_rebuilt and s.draft_prefilled_tokens >= s.reused_tokens
    assert "rebuilt" in dict(registry.run("/stats", ctx).rows)["speculative"]
    assert "tiny-d" in dict(registry.run("/cache", ctx).rows)["draft KV cache"]
    assert [first.token_ids, done.token_ids] == expected
    again.close()


def test_new_session_frees_the_draft(home, tiny, tiny_d, registry, ctx, conv, shelf):
    shelf.add(tiny_d)
    assert registry.run("/draft tiny-d", ctx).ok and conv.speculation.draft_name() == "tiny-d"
    assert registry.run("/new", ctx).ok
    assert conv.generation.speculative == conv.settings.generation.speculative == "auto"
    assert conv.speculation.draft_name() is None


def test_each_session_gets_its_own_draft(home, tiny, tiny_d, registry, ctx, conv, shelf):
    shelf.add(tiny_d, **{"tiny-self": tiny})
    assert registry.run("/draft tiny-d", ctx).ok
    send(conv, "first")
    first = conv.session.id
    assert registry.run("/new", ctx).ok
    assert registry.run("/draft tiny-self", ctx).ok
    send(conv, "second")
    assert registry.run(f"/open {first}", ctx).ok
    assert conv.speculation.draft_name() == "tiny-d" and conv.generation.draft == "tiny-d"
    assert send(conv, "again").stats.spec_mode == "draft"
