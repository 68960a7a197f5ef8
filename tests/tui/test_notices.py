"""Command tables adapt to the transcript's width (no Textual needed)."""

import io

from rich.console import Console

from mlxchat.tui.widgets.notices import ResultTable

ROWS = [("temperature", "0.7", "0.7", ">= 0 (0 is greedy)", "0 means greedy decoding."),
        ("context_policy", "drop_oldest", "drop_oldest", "drop_oldest or stop",
         "What to do when the conversation outgrows the window.")]
COLUMNS = ("setting", "value", "default", "allowed", "meaning")


def render(renderable, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_a_table_when_it_fits():
    lines = [line for line in render(ResultTable("Settings", COLUMNS, ROWS), 200) if line]
    assert lines[0] == "Settings"
    assert lines[1].split() == list(COLUMNS)
    assert lines[-1].split()[:3] == ["context_policy", "drop_oldest", "drop_oldest"]
    assert lines[-1].endswith("outgrows the window.")


def test_one_block_per_row_when_too_wide():
    lines = render(ResultTable("Settings", COLUMNS, ROWS), 40)
    assert lines[:6] == ["Settings", "temperature", "  value: 0.7", "  default: 0.7",
                         "  allowed: >= 0 (0 is greedy)", "  meaning: 0 means greedy decoding."]
    assert "  value: drop_oldest" in lines  # never cut inside a word


def test_two_columns_wrap_as_a_grid():
    rows = [("prompt", "1,056 tokens: 1,024 reused (snapshot cache), 32 prefilled"),
            ("peak memory", "120.3 MB")]
    lines = render(ResultTable("Last turn", ("", ""), rows), 40)
    assert lines[0] == "Last turn"
    assert lines[1].startswith("prompt") and "1,056 tokens" in lines[1]
    assert any(line.startswith("peak memory") and line.endswith("120.3 MB") for line in lines)
    assert max(map(len, lines)) <= 40


def test_cells_are_never_markup():
    lines = render(ResultTable("", ("title",), [("book the [tram] early",)]), 80)
    assert "book the [tram] early" in [line.strip() for line in lines]
