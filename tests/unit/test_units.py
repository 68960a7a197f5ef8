"""How figures are written (mlxchat.units): the same everywhere they are shown."""

from mlxchat.units import (
    fmt_gauge_percent,
    fmt_int,
    fmt_report_percent,
    fmt_seconds,
    fmt_tps,
    plural,
)


def test_numbers():
    assert fmt_int(1234567) == "1,234,567"
    assert fmt_int(1234.9) == "1,234"  # a count: a float is truncated
    assert fmt_seconds(0.0421) == "42 ms"
    assert fmt_seconds(1.5) == "1.50 s"
    assert fmt_seconds(75) == "1 min 15 s"
    assert fmt_tps(1234.56) == "1,234.6 tok/s"
    assert plural(1, "message") == "1 message"
    assert plural(1200, "message") == "1,200 messages"


def test_a_gauge_shows_whole_percent_reached_a_report_a_tenth():
    assert fmt_gauge_percent(799, 1000) == "79%"
    assert fmt_gauge_percent(1, 0) == "–"
    assert fmt_gauge_percent(1, -5) == "–"
    assert fmt_report_percent(799, 1000) == "79.9%"
    assert fmt_report_percent(1, 8) == "12.5%"
    assert fmt_report_percent(1, 0) == "-"
