"""The built-in catalog: one line per entry with size, context, KV per token
and licence; `mlxchat models` says which fit this machine."""

from __future__ import annotations

import json
from importlib import resources

from mlxchat import cli
from mlxchat.models import catalog, list_models, memory


def test_one_line_per_entry_with_every_figure():
    text = resources.files("mlxchat.models").joinpath("catalog.toml").read_text("utf-8")
    lines = [line for line in text.splitlines() if line.startswith('"')]
    entries = catalog.builtin_entries()
    assert len(lines) == len(entries) >= 14
    for e in entries:
        assert e.context_window and e.size_bytes and e.kv_bytes_per_token and e.licence, e
    families = " ".join(e.source for e in entries)
    for wanted in ("Qwen3-30B-A3B", "Qwen3-Next", "gemma-3-4b", "gpt-oss-20b",
                   "Llama-3.1-8B", "Mistral-Small", "DeepSeek-R1-Distill"):
        assert wanted in families


def test_bundled_kv_figure_matches_its_config(bundled_model_dir):
    config = json.loads((bundled_model_dir / "config.json").read_text())
    entry = catalog.lookup("smollm2-135m")
    assert memory.kv_layout(config, 2).full_bytes_per_token == entry.kv_bytes_per_token


def test_fit_column_from_the_figures():
    room = memory.Available(10_000_000_000, "available RAM")
    assert memory.entry_fit(2_000_000_000, 100_000, 40_000, room) == (6_000_000_000, "yes")
    need, fits = memory.entry_fit(8_000_000_000, 100_000, 40_000, room)
    assert need == 12_000_000_000 and fits == "up to 20,000 tokens"
    assert memory.entry_fit(11_000_000_000, 100_000, 40_000, room)[1] == "no"
    assert memory.entry_fit(None, 100_000, 40_000, room) == (None, "?")


def test_models_command_shows_fit_and_disk(capsys):
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = out[0].split()
    assert header[:5] == ["ALIAS", "SIZE", "CONTEXT", "NEEDS", "FITS"]
    rows = {e.alias: e for e in list_models()}
    big = next(line for line in out if line.startswith("qwen3-next-80b-a3b "))
    assert rows["qwen3-next-80b-a3b"].fits in big and "Apache-2.0" in big
