"""Export to Markdown and JSON, import JSON back, and file names that stay in their folder."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxchat.generation import GenerationSettings
from mlxchat.store import SessionStore, StoreError, open_store, title_from
from mlxchat.store.export import (
    export_session,
    markdown_stats_line,
    render_session,
    safe_filename,
    session_document,
    session_markdown,
)
from mlxchat.store.importing import import_json
from mlxchat.turn_stats import TurnStats

STATS = TurnStats(
    ttft_s=0.12,
    decode_tps=45.1,
    generated_tokens=132,
    prompt_tokens=1250,
    reused_tokens=1200,
    cache_source="warm",
)


@pytest.fixture
def branched(store: SessionStore) -> int:
    s = store.create_session(
        "smollm2-135m", "You are terse.\nVery.", GenerationSettings(temperature=0.3, seed=1)
    )
    q = store.add_message(s.id, "user", "What is MLX?", token_count=5)
    store.add_message(s.id, "assistant", "An array framework.", stats=STATS)
    store.add_message(
        s.id,
        "assistant",
        "A framework",
        parent_id=q.id,
        cancelled=True,
        stats=TurnStats(finish_reason="cancelled"),
    )
    return s.id  # type: ignore[return-value]


def test_markdown_stats_line() -> None:
    assert markdown_stats_line(STATS) == (
        "_ttft 0.12 s · 45.1 tok/s · 132 tokens · reused 1200/1250 · warm_")
    assert markdown_stats_line(TurnStats(kv_bits=4, finish_reason="length")).endswith(
        "· cold · kv 4-bit · length_"
    )


def test_markdown_has_header_and_current_branch(store: SessionStore, branched: int) -> None:
    store.branches.switch(branched, store.branches.of(branched)[0].leaf_id)
    text = render_session(store, branched, "md")
    assert text.startswith("# What is MLX?\n")
    for part in (
        "**Model:** smollm2-135m",
        "temperature 0.3",
        "seed 1",
        "> You are terse.\n> Very.",
        "### User\n\nWhat is MLX?",
        "### Assistant\n\nAn array framework.",
        "_ttft 0.12 s · 45.1 tok/s · 132 tokens · reused 1200/1250 · warm_",
    ):
        assert part in text
    assert "A framework\n" not in text  # the other branch is JSON-only


def test_json_round_trip_keeps_every_branch(
    store: SessionStore, branched: int, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    path = export_session(store, branched, "json", cwd=out, folder=out)
    assert path == out / f"What-is-MLX-{branched}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in out.iterdir()] == [path.name]  # no temp file left behind
    copy = import_json(store, path)
    original = store.get_session(branched)
    assert copy.id != branched
    assert copy.title == f"{original.title} (2)"  # a title names one session
    for field in ("model", "system_prompt", "settings", "title_locked", "created"):
        assert getattr(copy, field) == getattr(original, field)

    def shape(sid: int) -> list[tuple]:
        msgs = store.all_messages(sid)
        index = {m.id: i for i, m in enumerate(msgs)}
        return [
            (
                index.get(m.parent_id),
                m.role,
                m.content,
                m.token_count,
                m.stats,
                m.cancelled,
                m.created,
            )
            for m in msgs
        ]

    assert shape(copy.id) == shape(branched)
    assert [m.content for m in copy.messages] == [m.content for m in original.messages]
    assert {m.id for m in store.all_messages(copy.id)}.isdisjoint(
        {m.id for m in store.all_messages(branched)}
    )
    assert len(store.branches.of(copy.id)) == 2


def _doc(store: SessionStore, sid: int) -> dict:
    return json.loads(json.dumps(session_document(store, sid)))


def _break(doc: dict, how: str) -> object:
    msgs = doc["messages"]
    if how == "format":
        doc["format"] = "something-else"
    elif how == "newer":
        doc["version"] = 99
    elif how == "version-type":
        doc["version"] = "1"
    elif how == "no-session":
        del doc["session"]
    elif how == "no-content":
        del msgs[1]["content"]
    elif how == "no-parent-key":
        del msgs[1]["parent_id"]
    elif how == "role":
        msgs[0]["role"] = "robot"
    elif how == "content-type":
        msgs[0]["content"] = ["not", "text"]
    elif how == "bool-id":
        msgs[0]["id"] = True
    elif how == "huge-int":
        msgs[0]["token_count"] = 10**30
    elif how == "stats-type":
        msgs[1]["stats"]["ttft_s"] = "fast"
    elif how == "settings-type":
        doc["session"]["settings"]["context_policy"] = "explode"
    elif how == "kv-bits":
        doc["session"]["settings"]["kv_bits"] = 3
    elif how == "temperature":
        doc["session"]["settings"]["temperature"] = -1.0
    elif how == "cycle":
        msgs[0]["parent_id"] = msgs[2]["id"]
    elif how == "self-parent":
        msgs[0]["parent_id"] = msgs[0]["id"]
    elif how == "dangling":
        msgs[1]["parent_id"] = 424242
    elif how == "duplicate-id":
        msgs[2]["id"] = msgs[1]["id"]
    elif how == "leaf":
        doc["session"]["leaf_id"] = 424242
    elif how == "messages-type":
        doc["messages"] = {"a": 1}
    elif how == "top-level-list":
        return [doc]
    return doc


BREAKS = [
    "format",
    "newer",
    "version-type",
    "no-session",
    "no-content",
    "no-parent-key",
    "role",
    "content-type",
    "bool-id",
    "huge-int",
    "stats-type",
    "settings-type",
    "kv-bits",
    "temperature",
    "cycle",
    "self-parent",
    "dangling",
    "duplicate-id",
    "leaf",
    "messages-type",
    "top-level-list",
]


@pytest.mark.parametrize("how", BREAKS)
def test_import_rejects_bad_files_with_one_line(
    store: SessionStore, branched: int, how: str
) -> None:
    before = len(store.list_sessions(limit=None))
    bad = _break(_doc(store, branched), how)
    with pytest.raises(StoreError) as err:
        import_json(store, json.dumps(bad))
    assert "\n" not in str(err.value)
    if how == "newer":
        assert "newer mlxchat" in str(err.value)
    if how == "kv-bits":  # the words of the rule table /set uses
        assert "kv_bits must be none, 4 or 8; got 3" in str(err.value)
    assert len(store.list_sessions(limit=None)) == before


@pytest.mark.parametrize("text", ["", "{", "not json", "\xff", b"\xff\xfe", "[" * 100000, "NaN"])
def test_import_rejects_non_json(store: SessionStore, text: str | bytes) -> None:
    with pytest.raises(StoreError):
        import_json(store, text)


def test_import_a_missing_file(store: SessionStore, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="Cannot read"):
        import_json(store, tmp_path / "nope.json")


def test_import_lone_surrogates_is_a_store_error(store: SessionStore, branched: int) -> None:
    doc = _doc(store, branched)
    doc["messages"][1]["content"] = "\ud800"
    with pytest.raises(StoreError, match="not valid Unicode"):
        import_json(store, json.dumps(doc))


def test_export_names_and_folders(store: SessionStore, branched: int, tmp_path: Path) -> None:
    store.rename_session(branched, "../../etc/passwd / evil\\name")
    folder, cwd = tmp_path / "exports", tmp_path / "work"
    cwd.mkdir()
    # Without a path: the exports folder (made, private), a name with no spaces.
    default = export_session(store, branched, "md", cwd=cwd, folder=folder)
    assert default.parent == folder and default.name == f"etc-passwd-evil-name-{branched}.md"
    assert folder.stat().st_mode & 0o777 == 0o700
    # With one: the place the user named, relative to where they are.
    assert export_session(store, branched, "md", ".", cwd=cwd, folder=folder) == (
        cwd / default.name)
    (cwd / "sub").mkdir()
    assert export_session(store, branched, "md", "sub", cwd=cwd, folder=folder).parent == (
        cwd / "sub")
    (cwd / "new").mkdir()
    assert export_session(store, branched, "md", "new/", cwd=cwd, folder=folder).parent == (
        cwd / "new")
    assert export_session(store, branched, "json", "notes", cwd=cwd, folder=folder) == (
        cwd / "notes.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert export_session(store, branched, "md", str(elsewhere / "abs.md"), cwd=cwd,
                          folder=folder) == elsewhere / "abs.md"
    assert export_session(store, branched, "md", "../up.md", cwd=cwd, folder=folder) == (
        cwd / ".." / "up.md")
    again = export_session(store, branched, "md", "notes.txt", cwd=cwd, folder=folder)
    assert again.read_text().startswith("# ../../etc/passwd")


@pytest.mark.parametrize("dest", ["missing/x.md", "missing/deeper/x", "missing/",
                                  "/nonexistent/dir/x.md"])
def test_an_export_to_a_missing_folder_is_refused_and_makes_nothing(
    store: SessionStore, branched: int, tmp_path: Path, dest: str
) -> None:
    existed = Path("/nonexistent").exists()
    with pytest.raises(StoreError) as refused:
        export_session(store, branched, "md", dest, cwd=tmp_path, folder=tmp_path / "e")
    message = str(refused.value)
    assert "\n" not in message and "does not exist: make it first" in message, message
    assert not (tmp_path / "missing").exists() and not (tmp_path / "e").exists()
    assert Path("/nonexistent").exists() == existed


def test_an_export_never_changes_the_mode_of_the_users_folders(
    store: SessionStore, branched: int, tmp_path: Path
) -> None:
    cwd, named = tmp_path / "work", tmp_path / "work" / "x"
    named.mkdir(parents=True)
    for folder in (cwd, named):
        folder.chmod(0o755)
    written = [export_session(store, branched, "md", dest, cwd=cwd, folder=tmp_path / "e")
               for dest in ("x", "x/out.md", "out.md", ".")]
    assert all(path.is_file() for path in written)
    assert [stat.S_IMODE(f.stat().st_mode) for f in (cwd, named)] == [0o755, 0o755]
    assert stat.S_IMODE(written[0].stat().st_mode) == 0o600  # the file itself is private


def test_an_export_that_cannot_be_written_is_refused_in_one_line(
    store: SessionStore, branched: int, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(StoreError) as refused:
        export_session(store, branched, "md", "file/x.md", cwd=tmp_path, folder=tmp_path)
    assert "\n" not in str(refused.value) and "Cannot export to 'file/x.md'" in str(
        refused.value)


def test_unknown_format(store: SessionStore, branched: int, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="Unknown export format"):
        export_session(store, branched, "pdf", cwd=tmp_path)  # type: ignore[arg-type]


@cache
def _fuzz_store() -> SessionStore:
    """One in-memory store for every example (each makes its own session):
    migrating a new one per example was a third of this test's time."""
    return open_store(":memory:")


@settings(max_examples=200, deadline=None)
@given(title=st.text(max_size=120))
def test_fuzzed_titles_never_leave_the_exports_folder(title: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outer = Path(tmp)
        folder = outer / "exports"
        store = _fuzz_store()
        sid = store.create_session("m").id
        if title_from(title):
            store.rename_session(sid, title)
        store.add_message(sid, "user", title or "x")
        path = export_session(store, sid, "md", cwd=outer, folder=folder)
        assert path.parent == folder and path.is_file()
        assert [p.name for p in outer.iterdir()] == ["exports"]
        assert not [f for f in os.listdir(folder) if f.endswith(".tmp")]


@given(st.text())
def test_safe_filename_is_one_plain_component(title: str) -> None:
    name = safe_filename(title)
    assert name and "/" not in name and "\\" not in name and "\x00" not in name
    assert not name.startswith((".", "-", " ")) and len(name.encode()) <= 100
    assert not any(ch.isspace() for ch in name)


def test_settings_stored_out_of_range_fall_back_to_defaults(store: SessionStore,
                                                             db_path: Path) -> None:
    import sqlite3

    s = store.create_session("m", settings=GenerationSettings(temperature=0.2))
    bad = {**GenerationSettings(temperature=0.2).to_dict(), "kv_bits": 3, "top_p": 0}
    with sqlite3.connect(db_path) as conn:  # as an unchecked import of old stored them
        conn.execute("UPDATE sessions SET settings = ? WHERE id = ?", (json.dumps(bad), s.id))
    loaded = store.get_session(s.id).settings
    default = GenerationSettings()
    assert (loaded.kv_bits, loaded.top_p) == (default.kv_bits, default.top_p)
    assert loaded.temperature == 0.2
    loaded.check()


def test_reasoning_has_its_own_heading_and_survives_a_round_trip(store: SessionStore) -> None:
    s = store.create_session("r1", None, GenerationSettings(thinking=False,
                                                            reasoning_effort="low"))
    store.add_message(s.id, "user", "Why?")
    thought = "First idea.\n\nSecond idea."
    store.add_message(s.id, "assistant", "Because.", reasoning=thought,
                      stats=TurnStats(generated_tokens=20, reasoning_tokens=15))
    markdown = render_session(store, s.id, "md")
    lines = markdown.splitlines()
    thinking, answer = lines.index("#### Thinking"), lines.index("#### Answer")
    assert lines[thinking + 2:answer - 1] == ["> First idea.", ">", "> Second idea."]
    assert "Because." in lines[answer:] and "Because." not in lines[:answer]
    assert "20 tokens (15 thinking)" in markdown
    copy = import_json(store, render_session(store, s.id, "json"))
    reply = copy.messages[-1]
    assert (reply.content, reply.reasoning) == ("Because.", thought)
    assert copy.settings.thinking is False and copy.settings.reasoning_effort == "low"
    # A reply without reasoning has no heading and no key.
    plain = store.create_session("m")
    store.add_message(plain.id, "user", "Hi")
    store.add_message(plain.id, "assistant", "Hello")
    assert "#### Thinking" not in render_session(store, plain.id, "md")
    assert "reasoning" not in session_document(store, plain.id)["messages"][-1]


def test_the_markdown_header_says_settings_in_words(store: SessionStore, branched: int) -> None:
    header = session_markdown(store.get_session(branched)).split("---")[0]
    settings = next(line for line in header.splitlines() if line.startswith("- **Settings:**"))
    assert "None" not in settings and "True" not in settings and "False" not in settings
    assert "top_p model" in settings and "docs off" in settings and "tools off" in settings


def test_a_system_message_inside_the_conversation_exports_and_imports_back(
        store: SessionStore) -> None:
    """An API client's reminder after its first message is stored where it stood."""
    session = store.create_session("m")
    store.add_message(session.id, "user", "Task?")
    store.add_message(session.id, "system", "The environment.")
    store.add_message(session.id, "assistant", "Done.")
    assert "### System\n\nThe environment." in render_session(store, session.id, "md")
    copy = import_json(store, render_session(store, session.id, "json").encode())
    assert [(m.role, m.content) for m in copy.messages] == [
        ("user", "Task?"), ("system", "The environment."), ("assistant", "Done.")]
