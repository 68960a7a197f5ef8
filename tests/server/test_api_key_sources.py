"""Where `mlxchat serve` takes its API key from: a file only its owner can
read, the environment, or the command line (which works, but says once that
every user of the machine can read it there)."""

from __future__ import annotations

import importlib

import pytest

cli = importlib.import_module("mlxchat.cli.main")  # the package re-exports main()


@pytest.fixture
def launched(monkeypatch):
    """The options `run_app` would have been started with (no terminal, no model)."""
    calls: list = []
    monkeypatch.setattr(cli, "_need_terminal", lambda: None)
    monkeypatch.setattr("mlxchat.tui.app.run_app",
                        lambda settings, **kw: calls.append(kw["serve"]) or 0)
    monkeypatch.delenv("MLXCHAT_API_KEY", raising=False)
    return calls


def _serve(*argv: str) -> int:
    return cli.main(["serve", "--tui", "--host", "0.0.0.0", "--port", "0", *argv])


def test_a_key_file_only_its_owner_reads_gives_the_key(launched, tmp_path, capsys):
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    key.chmod(0o600)
    assert _serve("--api-key-file", str(key)) == 0
    assert launched[-1].api_key == "s3cret"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_key_file_others_can_read_is_refused_in_one_line(launched, tmp_path, capsys, mode):
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    key.chmod(mode)
    assert _serve("--api-key-file", str(key)) == 2
    err = capsys.readouterr().err
    assert f"can be read by other users (mode {mode:o}); chmod 600" in err
    assert err.count("\n") == 1 and launched == []


def test_a_missing_or_empty_key_file_is_refused(launched, tmp_path, capsys):
    assert _serve("--api-key-file", str(tmp_path / "none")) == 2
    assert "No such file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    assert _serve("--api-key-file", str(empty)) == 2
    assert "is empty" in capsys.readouterr().err
    assert launched == []


def test_the_environment_gives_the_key(launched, monkeypatch, capsys):
    monkeypatch.setenv("MLXCHAT_API_KEY", "from-env")
    assert _serve() == 0
    assert launched[-1].api_key == "from-env"
    assert capsys.readouterr().err == ""


def test_a_key_on_the_command_line_works_and_says_once_it_is_visible(launched, capsys):
    assert _serve("--api-key", "k") == 0
    assert launched[-1].api_key == "k"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "can be read by every user of this machine" in err
    assert "--api-key-file" in err


def test_two_key_flags_are_refused(launched, tmp_path, capsys):
    key = tmp_path / "key"
    key.write_text("a")
    key.chmod(0o600)
    assert _serve("--api-key", "b", "--api-key-file", str(key)) == 2
    assert "not both" in capsys.readouterr().err and launched == []
