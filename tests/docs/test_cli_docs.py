"""`mlxchat docs`: each bad input is one line on stderr, exit 1, nothing changed;
add, list, search --json, update and remove work end to end."""

from __future__ import annotations

import json

import pytest

from mlxchat.cli.main import main
from mlxchat.store import open_store


def _run(capsys, *argv):
    code = main(["docs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _collections():
    with open_store() as store:
        return [c.name for c in store.documents.list()]


@pytest.mark.parametrize("argv,message", [
    (["add", "bad name", "."], "Bad collection name 'bad name'"),
    (["add", "n", "/no/such/place"], "No such file or folder: /no/such/place"),
    (["update", "n"], "No document collection named 'n'"),
    (["remove", "n"], "No document collection named 'n'"),
    (["search", "n", "x"], "No document collection named 'n'"),
    (["search", "n", "  "], "The search query is empty."),
    (["search", "n", "x", "-k", "0"], "-k must be at least 1."),
])
def test_bad_input_is_one_line_and_changes_nothing(capsys, argv, message):
    code, out, err = _run(capsys, *argv)
    assert code == 1 and out == ""
    assert err.startswith("mlxchat: error: ") and message in err and err.count("\n") == 1
    assert _collections() == []


def test_add_list_search_update_remove(capsys, tmp_path):
    (tmp_path / "notes.md").write_text("# Boats\n\nSailing boats need wind and a keel.\n")
    (tmp_path / "junk.bin").write_bytes(b"\0\1\2")
    code, out, _ = _run(capsys, "add", "n", str(tmp_path))
    assert code == 0 and out.startswith("n: 1 files indexed (1 chunks")
    assert f"skipped {tmp_path}/junk.bin" in out
    code, out, _ = _run(capsys, "list")
    assert out.split()[:5] == ["n", "1", "files", "1", "chunks"]
    code, out, _ = _run(capsys, "search", "n", "what does a sailboat need", "--json")
    [hit] = json.loads(out)
    assert (hit["place"], hit["heading"]) == (f"{tmp_path}/notes.md:1-3", "Boats")
    code, out, _ = _run(capsys, "update", "n")
    assert "0 files indexed" in out and "1 unchanged" in out
    code, out, _ = _run(capsys, "remove", "n")
    assert out == "removed n (1 files, 1 chunks)\n" and _collections() == []
