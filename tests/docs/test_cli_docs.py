"""`mlxchat docs`: each bad input is one line on stderr, exit 1, nothing changed;
add, list, search --json, update and remove work end to end."""

from __future__ import annotations

import json

import pytest

from mlxchat.cli import main
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
    assert code == 0 and out.startswith("n: 1 files indexed (1 chunk in ")
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


def test_ask_with_docs_carries_its_sources(capsys, tmp_path, tiny_model_dir):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "boats.md").write_text("# Boats\n\nSailing boats need wind and a keel.\n")
    assert _run(capsys, "add", "n", str(folder))[0] == 0
    base = ["ask", "--model", str(tiny_model_dir), "--temp", "0", "--max-tokens", "2"]
    code = main([*base, "--docs", "n", "--json", "what does a sailboat need"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == 0, err
    [source] = data["sources"]
    assert source["place"] == f"{folder}/boats.md:1-3" and source["n"] == 1
    assert "Sailing boats need wind" in source["text"] and source["tokens"] > 0
    assert data["prompt_tokens"] > source["tokens"]  # the block went into the prompt
    # Without --json the sources are said on stderr, before the reply.
    code = main([*base, "--docs", "n", "what does a sailboat need"])
    out, err = capsys.readouterr()
    assert code == 0 and err.startswith("sources from n: 1 chunks")
    assert f"[1] {folder}/boats.md:1-3 · Boats" in err
    # Without --docs nothing is retrieved.
    code = main([*base, "--json", "what does a sailboat need"])
    assert json.loads(capsys.readouterr()[0])["sources"] is None
    # A collection that does not exist: a bad argument, one line, nothing asked.
    code = main([*base, "--docs", "nope", "hi"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "No document collection named 'nope'" in err
    assert err.count("\n") == 1


def test_ask_in_a_session_and_with_a_default_collection(capsys, tmp_path, tiny_model_dir):
    from mlxchat import paths

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "boats.md").write_text("# Boats\n\nSailing boats need wind and a keel.\n")
    assert _run(capsys, "add", "n", str(folder))[0] == 0
    base = ["ask", "--model", str(tiny_model_dir), "--temp", "0", "--max-tokens", "2", "--json"]
    # In a named session, --json carries the session and the sources both.
    assert main([*base, "--session", "s", "--docs", "n", "what does a sailboat need"]) == 0
    data = json.loads(capsys.readouterr()[0])
    assert data["session"]["title"] == "s" and data["sources"][0]["place"].endswith(
        "boats.md:1-3")
    # A collection set as the default for new sessions reaches a one-off question.
    paths.config_file().parent.mkdir(parents=True, exist_ok=True)
    paths.config_file().write_text('[generation]\ndocs = "n"\n')
    assert main([*base, "what does a sailboat need"]) == 0
    assert json.loads(capsys.readouterr()[0])["sources"][0]["n"] == 1
    assert main([*base, "--docs", "off", "what does a sailboat need"]) == 0
    assert json.loads(capsys.readouterr()[0])["sources"] is None
