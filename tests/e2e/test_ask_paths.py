"""`mlxchat ask` in-process on a tiny model: one turn path, session lookup, flags."""

from __future__ import annotations

import json
import re

import pytest

from mlxchat import cli
from mlxchat.session.turns import TurnRunner
from mlxchat.store import open_store


def ask(capsys, model_dir, *args: str) -> tuple[int, dict | None, str]:
    code = cli.main(["ask", "--model", str(model_dir), "--temp", "0", "--json", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def titles() -> list[str]:
    with open_store() as store:
        return sorted(s.title for s in store.list_sessions(limit=100))


def test_ask_with_and_without_a_session_go_through_the_conversation_s_turns(
        capsys, monkeypatch, tiny_model_dir):
    calls: list[str] = []
    real_send = TurnRunner.send

    def counting_send(self, text):
        calls.append(text)
        return real_send(self, text)
    monkeypatch.setattr(TurnRunner, "send", counting_send)
    code, one_off, _ = ask(capsys, tiny_model_dir, "--max-tokens", "3", "one-off")
    assert code == 0 and one_off["generated_tokens"] >= 1
    code, named, _ = ask(capsys, tiny_model_dir, "--max-tokens", "3", "--session", "kept", "hi")
    assert code == 0 and named["session"]["title"] == "kept"
    assert calls == ["one-off", "hi"]
    # The one-off question used a throwaway session: nothing was stored for it.
    assert titles() == ["kept"]


def test_a_one_token_reply_reports_no_decode_rate(capsys, tiny_model_dir):
    """One decoded token has no interval to time: null, not a measured-looking 0.0."""
    code, data, _ = ask(capsys, tiny_model_dir, "--max-tokens", "1", "hi")
    assert code == 0 and data["generated_tokens"] == 1
    assert data["decode_tps"] is None and data["prefill_tps"] > 0
    code, data, _ = ask(capsys, tiny_model_dir, "--max-tokens", "6", "hi")
    assert code == 0 and data["generated_tokens"] > 1 and data["decode_tps"] > 0


def test_flags_apply_to_the_call_on_an_existing_session(capsys, tiny_model_dir):
    code, _, _ = ask(capsys, tiny_model_dir, "--max-tokens", "16", "--session", "A", "first")
    assert code == 0
    code, second, _ = ask(capsys, tiny_model_dir, "--max-tokens", "3", "--session", "A",
                          "again")
    assert code == 0
    assert second["generated_tokens"] <= 3 and second["finish_reason"] in ("length", "stop")
    with open_store() as store:
        stored = store.find_session("A")
    # The session keeps its own setting; the flag was for that call only.
    assert stored.settings.max_tokens == 16 and len(stored.messages) == 4


def test_session_name_is_an_exact_title_or_id(capsys, tiny_model_dir):
    assert ask(capsys, tiny_model_dir, "--max-tokens", "2", "--session", "alpha trip", "a")[0] == 0
    # A prefix of another title is a new session, not a silent continuation.
    code, data, _ = ask(capsys, tiny_model_dir, "--max-tokens", "2", "--session", "alpha", "b")
    assert code == 0 and data["session"]["title"] == "alpha"
    assert titles() == ["alpha", "alpha trip"]
    # --new makes a second session with the same title; then the name is ambiguous.
    code, data, _ = ask(capsys, tiny_model_dir, "--max-tokens", "2", "--session", "alpha",
                        "--new", "c")
    assert code == 0 and titles() == ["alpha", "alpha", "alpha trip"]
    code, _, err = ask(capsys, tiny_model_dir, "--max-tokens", "2", "--session", "alpha", "d")
    assert code == 1 and "matches 2 sessions" in err and err.count("\n") == 1
    assert titles() == ["alpha", "alpha", "alpha trip"]  # nothing created on the error
    # The id always works.
    code, data, _ = ask(capsys, tiny_model_dir, "--max-tokens", "2", "--session",
                        f"#{data['session']['id']}", "e")
    assert code == 0 and data["session"]["title"] == "alpha"


def test_a_refused_prompt_leaves_no_empty_session(capsys, tiny_model_dir):
    huge = "word " * 5000  # far over the tiny model's window
    code, _, err = ask(capsys, tiny_model_dir, "--session", "too big", huge)
    assert code == 1 and "context window" in err
    assert titles() == []


@pytest.mark.parametrize("flags", [("--new",)])
def test_new_needs_a_session_name(capsys, tiny_model_dir, flags):
    code, _, err = ask(capsys, tiny_model_dir, *flags, "x")
    assert code == 2 and "--new needs --session" in err  # a usage error


def test_reasoning_goes_to_stderr_and_the_answer_to_stdout(capsys, tmp_path):
    from tests.families.builders import FAMILIES, write_family_model

    fam = next(f for f in FAMILIES if f.name == "qwen3_moe-r1")  # the reply opens in reasoning
    folder = write_family_model(fam, tmp_path / "r1")
    flags = ["--max-tokens", "3", "--max-reasoning-tokens", "5"]
    code, data, _ = ask(capsys, folder, *flags, "why?")
    assert code == 0 and data["reasoning"] and data["reasoning_budget_closed"]
    assert data["reasoning_tokens"] == 5 + 1  # the budget, then '</think>' closing it
    assert data["reasoning_tokens"] < data["generated_tokens"]  # and the answer after it
    code = cli.main(["ask", "--model", str(folder), "--temp", "0", *flags, "why?"])
    out, err = capsys.readouterr()
    assert code == 0 and out == data["reply"] + "\n"
    assert data["reasoning"] in err
    # This template does not read enable_thinking: the switch is refused, not ignored.
    code, _, err = ask(capsys, folder, *flags, "--think", "off", "why?")
    assert code != 0 and "enable_thinking" in err and len(err.strip().splitlines()) == 1


def test_context_caps_the_window_and_is_kept_with_the_session(capsys, tiny_model_dir):
    code, data, _ = ask(capsys, tiny_model_dir, "--max-tokens", "2", "--context", "300",
                        "--session", "capped", "hi")
    assert code == 0 and data["context_window"] == 300
    code, again, _ = ask(capsys, tiny_model_dir, "--max-tokens", "2", "--session", "capped",
                         "again")
    assert code == 0 and again["context_window"] == 300  # stored with the session
    code, _, err = ask(capsys, tiny_model_dir, "--context", "99999999", "hi")
    assert code != 0 and "--context can only lower" in err


def test_sessions_delete_removes_its_kv_segment_files(capsys, tiny_model_dir):
    from mlxchat import paths

    for q in ("one", "two"):
        assert ask(capsys, tiny_model_dir, "--max-tokens", "2", "--session", "gone", q)[0] == 0
    segments = sorted(paths.kv_dir().glob("*.safetensors"))
    # Each ask closes the session, joining its segment files into one.
    assert [p.name[:4] for p in segments] == ["cmp-"]
    assert cli.main(["sessions", "delete", "gone", "--yes"]) == 0
    capsys.readouterr()
    assert not any(p.exists() for p in segments) and titles() == []


def test_bare_sessions_lists_as_sessions_list_does(capsys, tiny_model_dir):
    assert cli.main(["sessions"]) == 0
    assert capsys.readouterr().out == "no sessions\n"
    assert ask(capsys, tiny_model_dir, "--max-tokens", "2", "--session", "kept", "hi")[0] == 0
    assert cli.main(["sessions"]) == 0
    bare = capsys.readouterr().out
    assert cli.main(["sessions", "list"]) == 0
    assert bare == capsys.readouterr().out and "kept" in bare
    assert cli.main(["sessions", "list", "--search", "nothing-said"]) == 0
    assert capsys.readouterr().out == "no matches\n"


def test_ask_speculates_with_a_draft_or_lookup_and_replies_the_same(capsys, tiny_model_dir):
    code, plain, _ = ask(capsys, tiny_model_dir, "--max-tokens", "12", "abc abc abc")
    assert code == 0 and plain["spec_mode"] == "off"
    # The model as its own draft: a folder spec, loaded like the main model.
    code, drafted, _ = ask(capsys, tiny_model_dir, "--max-tokens", "12", "--draft",
                           str(tiny_model_dir), "abc abc abc")
    assert code == 0 and drafted["spec_mode"] == "draft"
    assert drafted["draft_tokens_accepted"] > 0
    code, looked, _ = ask(capsys, tiny_model_dir, "--max-tokens", "12", "--speculative",
                          "lookup", "abc abc abc")
    assert code == 0 and looked["spec_mode"] == "lookup"
    assert plain["reply"] == drafted["reply"] == looked["reply"]


def test_ask_refuses_a_draft_without_a_model_to_pair(capsys, tiny_model_dir):
    code, _, err = ask(capsys, tiny_model_dir, "--draft", "auto", "hi")
    assert code != 0 and "pairs no draft model" in err


def test_kv_bits_on_a_head_size_that_cannot_quantize_is_refused(capsys, tiny_model_dir):
    code, _, err = ask(capsys, tiny_model_dir, "--kv-bits", "4", "--session", "q", "hi")
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert re.search(r"--kv-bits needs a head size that is a multiple of 32; \S+'s is 16, so "
                     r"its KV cache cannot be quantized", err), err
    assert titles() == []  # nothing was sent, no session was kept
