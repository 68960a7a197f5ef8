"""/set /get /model /models."""

from __future__ import annotations

import pytest

from mlxchat.config import load_settings
from mlxchat.generation import GenerationSettings

from tests.commands.conftest import send


@pytest.mark.parametrize("name, raw, value", [
    ("temperature", "0", 0.0), ("temperature", "1.3", 1.3), ("top_p", "1", 1.0),
    ("top_p", "0.9", 0.9), ("min_p", "0", 0.0), ("min_p", "0.05", 0.05),
    ("max_tokens", "1", 1), ("max_tokens", "4096", 4096), ("seed", "42", 42),
    ("seed", "none", None), ("repetition_penalty", "1.1", 1.1), ("kv_bits", "none", None),
    ("context_policy", "stop", "stop"), ("context_policy", "DROP_OLDEST", "drop_oldest"),
    ("TOP-P", "0.5", 0.5), ("repetition_context", "-1", -1),
    ("repetition_context", "0", 0), ("repetition_context", "64", 64),
])
def test_set_valid_values(registry, ctx, conv, name, raw, value):
    result = registry.run(f"/set {name} {raw}", ctx)
    assert result.ok, result.text
    key = name.lower().replace("-", "_")
    assert getattr(conv.generation, key) == value
    assert getattr(conv.store.get_session(conv.session.id).settings, key) == value


@pytest.mark.parametrize("name, raw, words", [
    ("temperature", "-0.1", "must be >= 0"), ("temperature", "nan", "finite"),
    ("temperature", "inf", "finite"), ("temperature", "warm", "takes a number"),
    ("top_p", "0", "> 0 and <= 1"), ("top_p", "1.5", "> 0 and <= 1"),
    ("min_p", "1", ">= 0 and < 1"), ("min_p", "-0.1", ">= 0 and < 1"),
    ("max_tokens", "0", ">= 1"), ("max_tokens", "1.5", "whole number"),
    ("seed", "-1", "none or a whole number"), ("seed", "x", "whole number"),
    ("seed", "99999999999999999999", "none or a whole number"),
    ("repetition_penalty", "0", "> 0"), ("kv_bits", "3", "none, 4 or 8"),
    ("context_policy", "rotate", "compact, drop_oldest or stop"),
    ("compact_at", "5", "10 to 95"),
    ("repetition_context", "-2", "-1 (the whole context), 0 (off)"),
    ("repetition_context", "1.5", "whole number"),
])
def test_set_invalid_values_change_nothing(registry, ctx, conv, name, raw, words):
    before = conv.generation.to_dict()
    result = registry.run(f"/set {name} {raw}", ctx)
    assert result.kind == "error" and words in result.text and "\n" not in result.text
    assert result.text.startswith(name)
    assert conv.generation.to_dict() == before


def test_set_unknown_setting_suggests(registry, ctx):
    assert registry.run("/set temprature 1", ctx).text == (
        "Unknown setting 'temprature'. Did you mean temperature?")


def test_set_default_saves_the_config_file(registry, ctx, conv, tmp_path):
    result = registry.run("/set --default temperature 0.25", ctx)
    assert result.ok and "saved to" in result.text
    assert load_settings(tmp_path / "config.toml").generation.temperature == 0.25
    assert conv.settings.generation.temperature == 0.25
    registry.run("/new", ctx)
    assert conv.generation.temperature == 0.25
    registry.run("/set temperature 0.5", ctx)  # this session only
    assert load_settings(tmp_path / "config.toml").generation.temperature == 0.25


def test_kv_bits_needs_a_quantizable_model(registry, ctx, conv):
    refused = registry.run("/set kv_bits 4", ctx)
    assert refused.kind == "error" and "head size" in refused.text
    assert registry.run("/model tiny-b", ctx).ok
    assert registry.run("/set kv_bits 8", ctx).ok
    done = send(conv, "Quantize me")
    assert done.stats.kv_bits == 8 and conv.views.state().kv_bits == 8


def test_get(registry, ctx, conv):
    table = registry.run("/get", ctx)
    assert table.kind == "table"
    assert [row[0] for row in table.rows] == list(GenerationSettings().to_dict())
    meanings = {row[0]: row[-1] for row in table.rows}
    assert meanings["temperature"] == "randomness of sampling; 0 always takes the likeliest token"
    # Words for the user: no code, no Python None, no meaning cut mid-word.
    for row in table.rows:
        cells = " ".join(row)
        assert "``" not in cells and ".py" not in cells and "None" not in cells, row
        assert not row[-1].endswith("…"), row
    one = registry.run("/get max_tokens", ctx)
    assert one.text == ("max_tokens = 8 · new sessions: 8 · allowed: >= 1 · longest answer, "
                        "in tokens.")
    assert "Did you mean seed?" in registry.run("/get sed", ctx).text
    assert registry.run("/set temperature model", ctx).ok
    assert conv.generation.temperature is None
    assert registry.run("/get temperature", ctx).text.startswith(
        "temperature = model, 0.7 here (built in) · new sessions: 0.0 ·")


def _depth(text: str) -> int:
    deepest = level = 0
    for ch in text:
        level += {"(": 1, ")": -1}.get(ch, 0)
        deepest = max(deepest, level)
    return deepest


def test_get_reads_without_nested_parentheses(registry, ctx, conv):
    assert registry.run("/set temperature model", ctx).ok
    for name in GenerationSettings().to_dict():
        text = registry.run(f"/get {name}", ctx).text
        assert _depth(text) <= 1, text


def test_get_shows_only_values_set_takes_back(registry, ctx, conv):
    """An unset setting is shown as a word its rule lists, the word /set takes
    for it (tools: 'off', never 'none'); the export says the same."""
    from mlxchat.commands.tuning import SETTINGS
    from mlxchat.store.export import session_markdown

    for line in ("temperature model", "thinking default", "reasoning_effort default", "tools off"):
        assert registry.run(f"/set {line}", ctx).ok, line
    table = {row[0]: row for row in registry.run("/get", ctx).rows}
    for name, setting in SETTINGS.items():
        text = registry.run(f"/get {name}", ctx).text
        word = text.split(" = ", 1)[1].split(" · ")[0].split(",")[0]
        if getattr(conv.generation, name) is None:
            assert word in setting.rule, (name, word, setting.rule)
            assert table[name][1].split(":")[0] == word
        if name in ("draft", "speculative"):
            continue  # they load or unload a draft model
        before = getattr(conv.generation, name)
        assert registry.run(f"/set {name} {word}", ctx).ok, (name, word)
        assert getattr(conv.generation, name) == before, name
    assert table["tools"][1] == "off"
    settings_line = session_markdown(conv.store.get_session(conv.session.id))
    assert "tools off" in settings_line


def test_set_unknown_setting_lists_every_name_under_one_line(registry, ctx):
    from mlxchat.commands.tuning import SETTINGS

    result = registry.run("/set foo 1", ctx)
    assert result.kind == "error" and "\n" not in result.text
    assert result.text.startswith("Unknown setting 'foo'.")
    assert result.more == ", ".join(SETTINGS) + "."
    assert result.plain() == f"{result.text}\n{result.more}"


def test_model_show_and_switch(registry, ctx, conv):
    shown = registry.run("/model", ctx)
    assert shown.kind == "table" and dict(shown.rows)["name"] == "tiny"
    assert registry.run("/model tiny", ctx).text == "Already using tiny."
    switched = registry.run("/model tiny-b", ctx)
    assert switched.ok and switched.session_changed and "tiny-b" in switched.text
    assert conv.engine.loaded.info.name == "tiny-b"
    assert conv.store.get_session(conv.session.id).model == "tiny-b"
    failed = registry.run("/model no-such-model", ctx)
    assert failed.kind == "error" and "unknown model" in failed.text
    assert conv.engine.loaded.info.name == "tiny-b"


def test_models_lists_catalog_and_the_loaded_model(registry, ctx, monkeypatch):
    from mlxchat.models import memory

    # Free RAM moves between two reads; the fit column is checked against one figure.
    fixed = memory.Available(12 * 10**9, "available RAM")
    monkeypatch.setattr(memory, "available_memory", lambda *a, **k: fixed)
    result = registry.run("/models", ctx)
    assert result.kind == "table" and result.open_screen is None
    aliases = [row[0] for row in result.rows]
    assert "smollm2-135m" in aliases and "tiny *" in aliases
    assert result.columns == ("alias", "bits", "size", "context", "fits", "offline",
                              "description")
    from mlxchat.models import list_models
    fits = {e.alias: e.fits for e in list_models()}
    assert all(row[4] == fits[row[0]] for row in result.rows if row[0] in fits)
    ctx.interactive = True
    assert registry.run("/models", ctx).open_screen == "models"


def test_context_window_caps_the_session_below_the_model(registry, ctx, conv):
    model_window = conv.views.model_info.context_window
    assert conv.views.context_window == model_window
    cap = model_window // 2
    assert registry.run(f"/set context_window {cap}", ctx).ok
    assert conv.views.context_window == cap
    assert conv.store.get_session(conv.session.id).settings.context_window == cap
    done = send(conv, "hello")
    assert done.stats.context_window == cap and conv.views.state().context_window == cap
    refused = registry.run(f"/set context_window {model_window + 1}", ctx)
    assert not refused.ok and f"{model_window:,}" in refused.text
    assert conv.views.context_window == cap
    assert registry.run("/set context_window none", ctx).ok
    assert conv.views.context_window == model_window
