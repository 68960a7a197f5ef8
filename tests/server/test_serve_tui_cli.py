"""`mlxchat serve --tui`: its options reach the app as they were given, and
bad ones are refused in one line before anything loads."""

from __future__ import annotations

import importlib

import pytest

from mlxchat.server.options import ServeOptions

cli = importlib.import_module("mlxchat.cli.main")  # the package re-exports main()


@pytest.fixture
def launched(monkeypatch):
    """What `run_app` would have been started with (no terminal, no model)."""
    calls: list[dict] = []
    monkeypatch.setattr(cli, "_need_terminal", lambda: None)
    monkeypatch.setattr("mlxchat.tui.app.run_app",
                        lambda settings, **kw: calls.append(kw) or 0)
    return calls


def test_serve_tui_runs_the_chat_with_the_server_options(launched):
    assert cli.main(["serve", "--tui", "--host", "0.0.0.0", "--port", "0", "--api-key", "k",
                     "--queue", "3", "--kv-budget", "1G", "--model", "tiny",
                     "--body-timeout", "5", "--parallel", "3"]) == 0
    assert launched == [{"model": "tiny", "serve": ServeOptions(
        host="0.0.0.0", port=0, api_key="k", queue=3, kv_budget_bytes=10**9,
        body_timeout_s=5.0, parallel=3)}]


@pytest.mark.parametrize("argv, words", [
    (["--port", "70000"], "--port must be 0 to 65535"),
    (["--queue", "0"], "--queue must be at least 1"),
    (["--parallel", "0"], "--parallel must be 1 to 64"),
    (["--parallel", "65"], "--parallel must be 1 to 64"),
    (["--kv-budget", "lots"], "--kv-budget must be a size"),
    (["--host", "0.0.0.0"], "give a key with --api-key-file PATH, $MLXCHAT_API_KEY or --api-key"),
    (["--body-timeout", "0"], "--body-timeout must be a number of seconds above 0"),
    (["--body-timeout", "nan"], "--body-timeout must be a number of seconds above 0"),
    (["--context", "100"], "context_window must be none or a whole number >= 256"),
])
def test_bad_serve_tui_options_are_one_line_and_start_nothing(launched, capsys, argv, words):
    assert cli.main(["serve", "--tui", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and err.startswith("mlxchat: error:")
    assert launched == []


@pytest.mark.parametrize("argv, words", [
    (["--host", "0.0.0.0", "--api-key", ""], "--api-key is empty"),
    (["--api-key", " "], "--api-key is empty"),
    (["--port", "abc"], "argument --port: invalid int value: 'abc'"),
    (["--port"], "argument --port: expected one argument"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--queue", "x"], "argument --queue: invalid int value"),
    (["--context", "lots"], "argument --context: invalid int value: 'lots'"),
])
def test_every_refusal_of_serve_is_one_line_and_exit_status_2(launched, capsys, argv, words):
    try:
        status = cli.main(["serve", "--tui", "--port", "0", *argv])
    except SystemExit as exc:  # argparse's own refusals exit from the parser
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and words in err, err
    assert err.count("\n") == 1 and err.startswith("mlxchat: error:")
    assert launched == []


def test_serve_tui_without_a_terminal_is_refused(monkeypatch, capsys):
    monkeypatch.setattr("mlxchat.tui.app.run_app", lambda settings, **kw: pytest.fail("ran"))
    assert cli.main(["serve", "--tui", "--port", "0"]) == 1  # pytest's stdin is no terminal
    assert "needs a terminal" in capsys.readouterr().err


def test_serve_from_the_chat_and_the_command_line_share_one_kv_budget(launched):
    """`/serve` in a plain chat gets ServeOptions() as its defaults: it has the
    same disk budget for the API's KV segments as `mlxchat serve`."""
    from mlxchat.cli.serve import parse_size

    assert cli.main(["serve", "--tui", "--model", "tiny"]) == 0
    given = launched[0]["serve"].kv_budget_bytes
    assert given == ServeOptions().kv_budget_bytes == parse_size("8G")
