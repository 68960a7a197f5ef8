"""/new /sessions /open /rename /delete /fork /branch /export /import /quit."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from mlxchat.commands.base import one_line
from mlxchat.store import title_from

from tests.commands.conftest import finish, send


def test_new(registry, ctx, conv):
    first = conv.session.id
    result = registry.run("/new", ctx)
    assert result.ok and result.session_changed
    assert conv.session.id != first and conv.messages == []


def test_leaving_an_unused_session_removes_it_as_quitting_does(registry, ctx, conv):
    send(conv, "Tell me about penguins")
    kept = conv.session.id
    for _ in range(3):  # ctrl+n pressed again and again
        assert registry.run("/new", ctx).ok
    assert registry.run(f"/open {kept}", ctx).ok
    assert [s.id for s in conv.saved.list()] == [kept]
    # One with a message stays; reopening the open one removes nothing.
    registry.run("/new", ctx)
    send(conv, "Tell me about volcanoes")
    assert registry.run(f"/open {kept}", ctx).ok and registry.run(f"/open {kept}", ctx).ok
    assert len(conv.saved.list()) == 2
    # Deleting the open session opens a new one in its place (nothing else goes).
    gone = conv.delete_session()
    assert gone.replacement is not None and gone.replacement.id == conv.session.id
    assert len(conv.saved.list()) == 2


def test_sessions_list_and_search(registry, ctx, conv):
    send(conv, "Tell me about penguins")
    registry.run("/new", ctx)
    send(conv, "Tell me about volcanoes")
    listing = registry.run("/sessions", ctx)
    assert listing.kind == "table" and listing.open_screen is None
    titles = [row[1] for row in listing.rows]
    assert titles == ["Tell me about volcanoes", "Tell me about penguins"]
    assert listing.rows[0][0].endswith("*")  # the open one
    found = registry.run("/sessions penguins", ctx)
    assert [row[1] for row in found.rows] == ["Tell me about penguins"]
    assert "[penguins]" in found.rows[0][-1].lower()
    assert registry.run("/sessions zebras", ctx).text == "No session matches 'zebras'."
    ctx.interactive = True
    assert registry.run("/sessions", ctx).open_screen == "sessions"


def test_open_by_title_and_id_restores_the_snapshot(registry, ctx, conv):
    send(conv, "First chat")
    first = conv.session.id
    registry.run("/new", ctx)
    result = registry.run("/open first chat", ctx)
    assert result.ok and result.session_changed, result.text
    assert conv.session.id == first and len(conv.messages) == 2
    # The live cache still holds it (/new left it): kept, no file read.
    assert "KV cache kept in memory" in result.text and "no file read" in result.text
    registry.run("/new", ctx)
    assert registry.run(f"/open #{first}", ctx).ok and conv.session.id == first


def test_open_errors(registry, ctx):
    assert registry.run("/open nothing like it", ctx).text == (
        "No session matches 'nothing like it'; /sessions lists them with their ids.")
    assert registry.run("/delete nothing like it", ctx).text.endswith("/sessions lists them "
                                                                      "with their ids.")
    assert registry.run("/open", ctx).text == "Usage: /open ID_OR_TITLE"
    ctx.interactive = True
    assert registry.run("/open", ctx).open_screen == "sessions"


def test_rename(registry, ctx, conv):
    result = registry.run("/rename Trip planning", ctx)
    assert result.ok and result.session_changed
    assert conv.store.get_session(conv.session.id).title == "Trip planning"


def test_delete_asks_then_deletes_rows_and_snapshot_files(registry, ctx, conv, home):
    send(conv, "Something private")
    doomed = conv.session.id
    files = list((home / "data" / "snapshots").glob("*.safetensors"))
    assert files
    result = registry.run("/delete", ctx)
    assert result.kind == "confirm" and result.confirm is not None
    assert "Something private" in result.confirm.question
    assert conv.store.get_session(doomed)  # nothing happens before the answer
    done = result.confirm.accept()
    assert done.ok and done.session_changed, done.text
    assert not any(f.exists() for f in files)
    assert doomed not in {s.id for s in conv.store.list_sessions()}
    assert conv.session.id != doomed and conv.views.state().cached_tokens == 0


def test_delete_another_session_by_title_and_with_yes(registry, ctx, conv):
    send(conv, "Keep me")
    registry.run("/new", ctx)
    send(conv, "Drop me")
    current = conv.session.id
    registry.run("/new", ctx)
    ctx.assume_yes = True
    result = registry.run("/delete keep me", ctx)
    assert result.kind == "info" and "Deleted" in result.text
    assert {s.title for s in conv.store.list_sessions()} == {"Drop me", "New chat"}
    assert registry.run("/delete nope", ctx).kind == "error"
    assert conv.store.get_session(current)


def test_fork(registry, ctx, conv):
    send(conv, "Original")
    source = conv.session.id
    result = registry.run("/fork", ctx)
    assert result.ok and result.session_changed
    assert conv.session.id != source
    assert [m.content for m in conv.messages] == [
        m.content for m in conv.store.get_session(source).messages]
    assert conv.session.title == "Original (fork)"


def test_branch_list_and_switch(registry, ctx, conv):
    send(conv, "Version one")
    old_leaf = conv.session.leaf_id
    assert registry.run("/branch", ctx).text.startswith("1 branch of #")
    finish(registry.run("/edit Version two", ctx))
    listing = registry.run("/branch", ctx)
    assert listing.text.startswith("2 branches of #")
    assert next(row[0] for row in listing.rows) == f"#{old_leaf}"
    assert [row[-1] for row in listing.rows] == ["", "current"]
    result = registry.run(f"/branch {old_leaf}", ctx)
    assert result.ok and result.session_changed
    assert conv.session.leaf_id == old_leaf and conv.messages[0].content == "Version one"
    assert "not a message id" in registry.run("/branch abc", ctx).text
    assert registry.run("/branch 99999", ctx).kind == "error"


def test_branch_shows_where_each_branch_diverges_and_takes_inner_messages(registry, ctx,
                                                                          conv):
    send(conv, "Version one")
    first_reply = conv.messages[-1]
    assert registry.run("/set temperature 2", ctx).ok  # the tiny model then answers anew
    finish(registry.run("/retry", ctx))
    second_reply = conv.messages[-1]
    listing = registry.run("/branch", ctx)
    assert listing.columns[2] == "where it diverges"
    previews = [row[2] for row in listing.rows]
    # A retry differs in its reply: that is what each row shows.
    assert previews == [f"reply: {one_line(title_from(first_reply.content), 40)}",
                        f"reply: {one_line(title_from(second_reply.content), 40)}"]
    assert first_reply.content != second_reply.content
    # The shared question is not a leaf: /branch says so and which leaves hold it.
    question = conv.messages[0].id
    result = registry.run(f"/branch {question}", ctx)
    assert result.ok and result.session_changed
    assert f"#{question} is not the end of a branch" in result.text
    assert f"#{first_reply.id}" in result.text and f"#{second_reply.id}" in result.text
    assert conv.session.leaf_id == second_reply.id


def test_branch_after_undo_lists_only_real_branches_and_says_where_you_are(registry, ctx,
                                                                          conv):
    send(conv, "One")
    send(conv, "Two")
    leaf = conv.messages[-1].id
    assert registry.run("/undo", ctx).ok
    at = conv.session.leaf_id
    listing = registry.run("/branch", ctx)
    # One branch: the position /undo went back to is inside it, not another branch.
    assert [row[0] for row in listing.rows] == [f"#{leaf}"] and listing.rows[0][4] == ""
    assert listing.text.startswith("1 branch of ")
    assert f"You are at #{at}, inside the branch ending at #{leaf}" in listing.text
    send(conv, "Three")  # the next message makes the second branch
    listing = registry.run("/branch", ctx)
    assert len(listing.rows) == 2 and listing.rows[-1][4] == "current"
    assert "You are at" not in listing.text


def test_export_md_and_json(registry, ctx, conv, tmp_path):
    send(conv, "Export me")
    result = registry.run("/export md", ctx)  # no path: the exports folder
    assert result.ok, result.text
    md = next((tmp_path / "exports").glob("*.md"))
    assert "Export me" in md.read_text() and " " not in md.name
    assert f" to {md} (" in result.text  # the full path, not just a name
    # A path is the user's: relative to where they are, and anywhere they can write.
    (tmp_path / "work" / "sub").mkdir()
    (tmp_path / "work" / "sub").chmod(0o755)
    assert registry.run("/export json sub/", ctx).ok
    assert stat.S_IMODE((tmp_path / "work" / "sub").stat().st_mode) == 0o755
    data = json.loads(next((tmp_path / "work" / "sub").glob("*.json")).read_text())
    assert data["format"] == "mlxchat-session"
    outside = registry.run("/export md ../outside.md", ctx)
    assert outside.ok and (tmp_path / "outside.md").is_file()
    assert registry.run("/export pdf", ctx).text.startswith("Unknown format 'pdf'")
    missing = registry.run("/export md new/x.md", ctx)  # a missing folder is not made
    assert missing.kind == "error" and "does not exist: make it first" in missing.text
    assert not (tmp_path / "work" / "new").exists()


def test_help_export_names_the_folder_it_writes_to(registry, ctx):
    text = registry.run("/help export", ctx).text
    assert f"{ctx.exports_dir}{os.sep}" in text and str(ctx.cwd()) in text, text


def test_import_round_trip(registry, ctx, conv, tmp_path):
    send(conv, "Round trip")
    registry.run("/export json saved.json", ctx)
    registry.run("/new", ctx)
    result = registry.run(f"/import {tmp_path / 'work' / 'saved.json'}", ctx)
    assert result.ok and result.session_changed, result.text
    assert conv.messages[0].content == "Round trip"


def test_import_errors(registry, ctx, tmp_path):
    work = tmp_path / "work"
    (work / "bad.json").write_text("{not json")
    (work / "other.json").write_text('{"hello": 1}')
    assert registry.run("/import missing.json", ctx).text.startswith("No such file")
    assert "is not a file" in registry.run("/import .", ctx).text
    assert "not JSON" in registry.run("/import bad.json", ctx).text
    assert "Not an mlxchat session export" in registry.run("/import other.json", ctx).text


def test_quit(registry, ctx):
    result = registry.run("/quit", ctx)
    assert result.quit and result.ok


def test_every_error_is_one_line(registry, ctx):
    for line in ("/open x\ny", "/branch 1\n2", "/import /nonexistent/dir/x.json",
                 "/export md /nonexistent/dir/x.md"):
        result = registry.run(line, ctx)
        assert result.kind == "error" and "\n" not in result.text, result.text
    assert Path("/nonexistent").exists() is False
