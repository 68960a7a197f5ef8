"""The README and the user guide (docs/*.md) hold to the code.

Both ways: every slash command, every `mlxchat` subcommand and flag, every
setting and environment variable the code has appears in docs/; and every
`/command`, `--flag`, `mlxchat SUBCOMMAND`, `/set NAME` and `MLXCHAT_*` the
pages write exists. Every `mlxchat` line in a code block parses. Links stay
inside the repository and land on a page and heading that exist. The README
stays a front door: at most 250 lines, with the two commands of the quick start.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from mlxchat.cli.main import build_parser
from mlxchat.commands import default_registry
from mlxchat.commands.tuning import SETTINGS
from mlxchat.config import Settings
from mlxchat.generation import GenerationSettings
from mlxchat.tui.serving import serve_command

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *GUIDE]
README_MAX_LINES = 250

EXTERNAL_FLAGS = {"--hostfile": "mlx.launch", "--prompt-cache-size": "mlx_lm.server",
                  "--no-deps": "pip", "--output-format": "claude", "--continue": "claude",
                  "--allowed": "claude", "--skip-git-repo-check": "codex",
                  "--last": "codex", "--depth": "git", "--filter": "git", "--sparse": "git",
                  "--ctx-size": "llama.cpp"}
"""Flags of other programs a page may name, each only beside its program's name."""

SLASH = re.compile(r"(?<![\w/.~:\-\]\)<>@`'\"])/([a-z][a-z0-9_-]*)(?![\w/-]|\.\w)")
"""A slash command in prose: not a path (a/b, ~/x, /dev/tty, /v1/...), nor a URL."""
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
ENV = re.compile(r"\bMLXCHAT_[A-Z_]*[A-Z]\b")
SET_NAME = re.compile(r"/(?:set|get)(?: --default)? ([a-z_]+)\b")
LINK = re.compile(r"\]\(([^)\s]+)\)|src=\"([^\"]+)\"")


# -- reading the pages --------------------------------------------------------------

@cache
def _split(path: Path) -> tuple[str, tuple[str, ...]]:
    """(prose, fenced lines) of a page: code blocks apart from the rest."""
    prose, fenced, inside = [], [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            prose.append("")
            continue
        (fenced if inside else prose).append(line)
        if inside:
            prose.append("")
    return "\n".join(prose), tuple(fenced)


def _spans(prose: str) -> list[str]:
    """Inline code spans, their line breaks as spaces."""
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose)]


def _guide_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in GUIDE)


def _all_text() -> Iterator[tuple[Path, str]]:
    for page in PAGES:
        yield page, page.read_text(encoding="utf-8")


# -- what the code has --------------------------------------------------------------

@cache
def _registry():
    registry = default_registry()
    registry.add(serve_command(None))  # the app adds /serve beside the registry's own
    return registry


def _parsers() -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub)command of `mlxchat` with its parser, the root first."""
    todo = [((), build_parser())]
    while todo:
        path, parser = todo.pop(0)
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [((*path, name), sub) for name, sub in action.choices.items()]


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings} - {"-h", "--help"}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@cache
def _known_flags() -> frozenset[str]:
    """Flags of mlxchat's parsers, its slash commands and the scripts under bench/."""
    flags = {o for _, p in _parsers() for o in _options(p)}
    flags |= {f for c in _registry().commands for f in c.flags}
    for script in [*(ROOT / "bench").glob("*.py"), ROOT / "assets/screenshots/make.py"]:
        flags |= set(re.findall(r"[\"'](--[a-z][a-z0-9-]*)[\"']", script.read_text()))
    return frozenset(flags)


def _setting_names() -> set[str]:
    return {*SETTINGS, *(f.name for f in dataclasses.fields(GenerationSettings))}


def _env_names() -> set[str]:
    return {m for pattern in ("*.py", "*.cpp", "*.h") for f in (ROOT / "app").rglob(pattern)
            for m in ENV.findall(f.read_text())}


def _config_keys() -> set[str]:
    return {f.name for f in dataclasses.fields(Settings)} - {"generation"}


# -- the README is a front door -----------------------------------------------------

def test_readme_is_a_front_door_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    _, fenced = _split(README)
    starts = {line.split("#")[0].strip() for line in fenced}
    assert {"make run", "make test"} <= starts, "the quick start lost `make run` / `make test`"


# -- everything the code has is in the guide ----------------------------------------

def test_every_slash_command_is_in_the_guide() -> None:
    text = _guide_text()
    missing = [f"/{name}" for c in _registry().commands for name in (c.name, *c.aliases)
               if not re.search(rf"/{re.escape(name)}(?![\w-])", text)]
    assert not missing, f"slash commands no page of docs/ names: {missing}"


def test_every_subcommand_and_flag_is_in_the_guide() -> None:
    text = _guide_text()
    missing = []
    for path, parser in _parsers():
        if path and " ".join(("mlxchat", *path)) not in text:
            missing.append(" ".join(("mlxchat", *path)))
        missing += [f"{' '.join(('mlxchat', *path))} {o}" for o in _options(parser)
                    if o.startswith("--") and not re.search(rf"{o}(?![\w-])", text)]
    assert not missing, f"not in docs/: {missing}"


def test_every_serve_flag_is_on_the_server_page() -> None:
    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    serve = dict(_parsers())[("serve",)]
    missing = [o for o in _options(serve) if o.startswith("--")
               and not re.search(rf"{o}(?![\w-])", text)]
    assert not missing, f"serve flags docs/server.md does not name: {missing}"


def test_every_setting_and_variable_is_in_the_guide() -> None:
    text = _guide_text()
    names = _setting_names() | _config_keys() | _env_names()
    missing = sorted(n for n in names if not re.search(rf"(?<![\w]){n}(?![\w])", text))
    assert not missing, f"settings or variables docs/ does not name: {missing}"


# -- everything the pages name exists -----------------------------------------------

def _slash_commands_named(path: Path) -> set[str]:
    prose, fenced = _split(path)
    named = set(SLASH.findall(prose))
    named |= {s[1:].split()[0] for s in _spans(prose) if re.match(r"/[a-z][\w-]*(\s|$)", s)}
    named |= {line.split()[0][1:] for line in fenced if re.match(r"\s*/[a-z]", line)}
    return named


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_slash_command_named_exists(page: Path) -> None:
    unknown = sorted(n for n in _slash_commands_named(page) if _registry().get(n) is None)
    assert not unknown, f"{page.name} names slash commands that do not exist: {unknown}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_setting_named_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    unknown = sorted(set(SET_NAME.findall(text)) - _setting_names())
    unknown += sorted(set(ENV.findall(text)) - _env_names())
    assert not unknown, f"{page.name} names settings that do not exist: {unknown}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_flag_named_exists(page: Path) -> None:
    unknown = []
    for paragraph in re.split(r"\n\s*\n", page.read_text(encoding="utf-8")):
        for flag in FLAG.findall(paragraph):
            tool = EXTERNAL_FLAGS.get(flag)
            if tool is not None and tool in paragraph:
                continue
            if flag not in _known_flags():
                unknown.append(flag)
    assert not unknown, f"{page.name} names flags that do not exist: {sorted(set(unknown))}"


def _check_span(span: str) -> str | None:
    """Why an inline `mlxchat ...` names a subcommand or flag that does not exist."""
    try:
        words = shlex.split(span)
    except ValueError:
        words = span.split()
    words = [w.strip("[]") for w in words[1:] if w.strip("[]")]
    if words and words[0].endswith(":"):
        return None  # a line mlxchat printed ("mlxchat serve: 10:42:07 POST ...")
    parser, positional, value_next = build_parser(), False, False
    allowed = _actions(parser)
    for word in words:
        if value_next:
            value_next = False
        elif word.startswith("-"):
            action = allowed.get(word.split("=")[0])
            if action is None and word.startswith("--"):
                return f"{word} is no flag of {span!r}"
            value_next = action is not None and action.nargs != 0 and "=" not in word
        elif (subs := _subcommands(parser)) and not positional:
            if word not in subs:
                return f"{word!r} is no subcommand in {span!r}"
            parser = subs[word]
            allowed |= _actions(parser)
        else:
            positional = True
    return None


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in parser._actions for o in a.option_strings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_mlxchat_command_named_exists(page: Path) -> None:
    prose, _ = _split(page)
    problems = [p for s in _spans(prose) if s.startswith("mlxchat ")
                if (p := _check_span(s)) is not None]
    assert not problems, f"{page.name}: {problems}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_mlxchat_line_in_a_code_block_parses(page: Path) -> None:
    _, fenced = _split(page)
    failures = []
    for line in fenced:
        text = line.strip().removeprefix("$ ")
        if not text.startswith("mlxchat ") and text != "mlxchat":
            continue
        argv = shlex.split(text, comments=True)[1:]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(argv)
        except SystemExit:
            failures.append(f"{text!r}: {err.getvalue().strip().splitlines()[-1:]}")
    assert not failures, f"{page.name}: lines that do not parse: {failures}"


# -- links -----------------------------------------------------------------------------

def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    prose, _ = _split(path)
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", prose, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_stay_in_the_repository_and_land(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "../shared" not in text and "/work/" not in text
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.is_relative_to(ROOT) or not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{page.name}: links that leave the repository or land nowhere: {broken}"
