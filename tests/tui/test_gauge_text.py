"""A line of figures fits its width by leaving parts out, least telling first,
or saying them shorter; a part is never cut."""

from mlxchat.tui.widgets.gauge_text import cells, fit, part

PARTS = [part("warm cache"), part("ttft 264 ms"), part("decode 4.2 tok/s", rank=1),
         part("reused 31 / new 1", rank=3),
         part("[$warning]miss: reply retried: trimmed back[/]", "[$warning]cache miss[/]",
              rank=2),
         part("prefill 35.1 tok/s", rank=4)]


def test_all_parts_when_they_fit():
    line = fit(PARTS, 200)
    assert line.count(" · ") == len(PARTS) - 1 and "prefill 35.1 tok/s" in line


def test_the_highest_ranks_give_way_first_and_the_order_stays():
    line = fit(PARTS, 78)
    assert cells(line) <= 78
    assert line == ("warm cache · ttft 264 ms · decode 4.2 tok/s · reused 31 / new 1 · "
                    "[$warning]cache miss[/]")
    line = fit(PARTS, 44)
    assert line == "warm cache · ttft 264 ms · decode 4.2 tok/s"
    assert fit(PARTS, 30) == "warm cache · ttft 264 ms"
