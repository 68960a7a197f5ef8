"""`make run` once set up is quiet and offline (issue 47): every line of the
recipes a start runs is silenced, and the one that may reach the network (the
BLAS fallback) sits behind a stamp, tried once."""

from __future__ import annotations

import re
from pathlib import Path

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


def recipes() -> dict[str, tuple[list[str], list[str]]]:
    """Each target's prerequisites and recipe lines (continuations joined)."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    target = None
    for line in re.sub(r"\\\n", " ", MAKEFILE.read_text()).splitlines():
        rule = re.match(r"^([^\s:#=][^:=]*):(?!=)(.*)$", line)
        if rule:
            target = rule.group(1).strip()
            out[target] = (rule.group(2).split(), [])
        elif line.startswith("\t") and target is not None:
            out[target][1].append(line[1:])
        elif line.strip() and not line.startswith("#"):
            target = None
    return out


def test_a_start_runs_only_silenced_lines_and_nothing_that_downloads():
    rules = recipes()
    start, seen = ["run"], set()
    while start:  # the targets `make run` visits once set up (not the install stamp)
        name = start.pop()
        if name in seen or name == "$(STAMP)":
            continue
        seen.add(name)
        prerequisites, lines = rules[name]
        if name != "$(BLAS_STAMP)":  # a file target: made once, not at every start
            start += [p for p in prerequisites if p in rules]
            assert not any(word in line for line in lines
                           for word in ("pip install", "apt-get")), (name, lines)
        assert all(line.startswith("@") for line in lines), (name, lines)
    assert seen == {"run", "model", "$(BLAS_STAMP)"}
    assert rules["$(BLAS_STAMP)"][1][-1] == "@touch $@"
