"""Random input at the parser, every handler and the completer: always a clean result."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlxchat.commands import CommandContext, CommandResult, default_registry
from mlxchat.engine.events import EngineError
from mlxchat.session.errors import ConversationError

from tests.commands.conftest import NOW, make_conversation, send

REGISTRY = default_registry()
NAMES = sorted({n for c in REGISTRY.commands for n in (c.name, *c.aliases)})
FLAGS = sorted({f for c in REGISTRY.commands for f in c.flags})

words = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["'", '"', "\\", "--", "-1", "0", "1", "none", "nan", "1e309", "#1",
                     "md", "json", "save", "drop", "..", "/", "~", "./x", "../../../etc",
                     "temperature", "kv_bits", "seed", "context_policy", *FLAGS]),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=8),
)
args = st.one_of(
    st.text(max_size=200),
    st.lists(words, max_size=5).map(" ".join),
    st.text(min_size=2000, max_size=3000),
)
lines = st.one_of(
    st.text(max_size=100),
    st.builds(lambda name, rest: f"/{name} {rest}", st.sampled_from(NAMES), args),
    st.builds(lambda name, rest: f"/{name}{rest}", st.sampled_from(NAMES), args),
    st.builds(lambda rest: "/" + rest, st.text(max_size=60)),
)


@pytest.fixture(scope="module")
def fuzz_ctx(tmp_path_factory, tiny, tiny_b):
    tmp = tmp_path_factory.mktemp("fuzz")
    work = tmp / "work"
    work.mkdir()
    (work / "notes.txt").write_text("Some notes to attach.\n")
    patch = pytest.MonkeyPatch()
    patch.setenv("MLXCHAT_HOME", str(tmp / "home"))
    patch.chdir(work)
    conv = make_conversation(tmp, tiny, tiny_b)
    send(conv, "A first turn, so /retry, /edit, /copy and /stats have something.")
    copied: list[str] = []
    ctx = CommandContext(conv, clipboard=copied.append, config_path=tmp / "config.toml",
                         now=lambda: NOW, cwd=lambda: work, exports_dir=tmp / "exports")
    yield ctx
    conv.close()
    conv.store.close()
    patch.undo()


def _check(result: CommandResult) -> None:
    assert isinstance(result, CommandResult)
    if result.kind == "error":
        assert result.text and "\n" not in result.text and len(result.text) <= 300
    if result.turn is not None:
        try:
            for _ in result.turn:
                pass
        except (ConversationError, EngineError) as exc:  # the UI shows these like a send's
            assert str(exc)
    if result.confirm is not None:
        _check(result.confirm.accept())


def _listing(folder: Path) -> set[str]:
    return set(os.listdir(folder)) if folder.is_dir() else set()


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(line=lines)
def test_any_line_gives_a_clean_result(fuzz_ctx, line):
    _check(REGISTRY.run(line, fuzz_ctx))
    assert all(c.value.startswith("/") for c in REGISTRY.complete(line, fuzz_ctx))


def test_fuzzing_wrote_nothing_outside_its_temp_folder(tmp_path_factory, tiny, tiny_b):
    """The same fuzz run again, watching the folders a stray write would land in."""
    watched = [Path(__file__).resolve().parents[2], Path.home()]
    before = {folder: _listing(folder) for folder in watched}
    tmp = tmp_path_factory.mktemp("watched")
    work = tmp / "work"
    work.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLXCHAT_HOME", str(tmp / "home"))
        patch.chdir(work)
        conv = make_conversation(tmp, tiny, tiny_b)
        ctx = CommandContext(conv, clipboard=lambda text: None, config_path=tmp / "c.toml",
                             cwd=lambda: work, exports_dir=tmp / "exports")

        @settings(max_examples=60, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.function_scoped_fixture])
        @given(line=lines)
        def fuzz(line):
            _check(REGISTRY.run(line, ctx))
            REGISTRY.complete(line, ctx)
        try:
            fuzz()
        finally:
            conv.close()
            conv.store.close()
    assert {folder: _listing(folder) for folder in watched} == before
    written = {p.relative_to(tmp).parts[0] for p in tmp.rglob("*") if p.is_file()}
    assert written <= {"home", "exports", "s.db", "s.db-wal", "s.db-shm", "c.toml", "work",
                       "locks"}
