"""End-to-end: the real `mlxchat` command on the bundled INT4 model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import seed_models_cache

pytestmark = pytest.mark.bundled


def mlxchat(*args: str, stdin: str | None = None, timeout: int = 300,
            home: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = os.environ.copy() if home is None else {**os.environ, "MLXCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "mlxchat", *args], input=stdin, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


def is_english_prose(text: str) -> bool:
    letters = sum(c.isascii() and (c.isalpha() or c in " .,'!?-\n") for c in text)
    words = re.findall(r"[A-Za-z]{2,}", text)
    return len(text) > 10 and letters / len(text) > 0.9 and len(words) >= 3


@pytest.fixture(scope="module")
def first_ask(bundled_model_dir, tmp_path_factory) -> tuple[Path, dict]:
    """A first `ask --json` in a session named demo, in its own home: the English
    test reads its reply, the resume test continues the session (one start of
    the bundled model for both, ~5-15 s here)."""
    home = tmp_path_factory.mktemp("demo-home")
    seed_models_cache(home)
    assert (home / "cache" / "models" / bundled_model_dir.name).is_dir()
    proc = mlxchat("ask", "--session", "demo", "--max-tokens", "24", "--temp", "0", "--json",
                   "What is the capital of France?", home=home)
    assert proc.returncode == 0, proc.stderr
    return home, json.loads(proc.stdout)


def test_ask_answers_in_english_and_stops_at_end_of_turn(first_ask):
    _, data = first_ask
    assert is_english_prose(data["reply"]), data["reply"]
    for key in ("model", "prompt_tokens", "generated_tokens", "ttft_s", "prefill_tps",
                "decode_tps", "kv_bytes", "context_used", "context_window",
                "peak_memory_bytes", "finish_reason"):
        assert key in data
    assert data["context_window"] == 8192
    if data["generated_tokens"] < 24:
        assert data["finish_reason"] == "stop"
    assert data["context_used"] == data["prompt_tokens"] + data["generated_tokens"]


def test_ask_streams_plain_text_from_stdin(bundled_model_dir):
    proc = mlxchat("ask", "--max-tokens", "8", "--temp", "0", "-", stdin="Say hello.")
    assert proc.returncode == 0, proc.stderr
    assert is_english_prose(proc.stdout)


@pytest.mark.parametrize("args,needle,status", [
    (("ask", "--model", "does-not-exist", "x"), "unknown model 'does-not-exist'", 1),
    (("import", "/etc/hostname"), "not a GGUF file", 1),
    (("ask", "--model", "some-org/not-downloaded", "x"), "some-org/not-downloaded", 1),
    (("sessions", "show", "nope"), "No session matches", 1),
    # Bad arguments are 2, as argparse's own refusals and --schema's (docs/chat.md).
    (("ask", "--top-p", "0", "x"), "top_p must be > 0 and <= 1", 2),
    (("ask", "--temp", "-1", "x"), "temperature must be >= 0", 2),
    (("ask", "--docs", "nope", "x"), "No document collection named 'nope'", 2),
    (("ask", "--docs", "bad/name", "x"), "Bad collection name 'bad/name'", 2),
    (("ask", "--schema", "/no/such.json", "x"), "--schema /no/such.json", 2),
    (("--pin", "/no/such/notes.md"), "--pin /no/such/notes.md: no such file", 2),
])
def test_bad_input_is_one_clear_line(args, needle, status):
    proc = mlxchat(*args)
    assert proc.returncode == status
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("mlxchat: error: ") and needle in lines[0]


def test_session_resumes_from_snapshot_in_a_new_process(first_ask):
    home, one = first_ask
    assert one["cache_source"] == "cold" and one["session"]["title"] == "demo"
    second = mlxchat("ask", "--session", "demo", "--max-tokens", "12", "--temp", "0", "--json",
                     "And three vegetables?", home=home)
    assert second.returncode == 0, second.stderr
    two = json.loads(second.stdout)
    assert two["snapshot"] == {"ok": True, "reason": None}
    assert two["cache_source"] == "snapshot" and two["miss_reason"] is None
    # Only the new message (and its template tokens) is prefilled.
    assert two["reused_tokens"] == one["context_used"]
    assert two["prefilled_tokens"] == two["prompt_tokens"] - one["context_used"]
    assert two["prefilled_tokens"] < 20
    listing = mlxchat("sessions", "list", "--json", home=home)
    rows = json.loads(listing.stdout)
    assert [r["title"] for r in rows] == ["demo"] and rows[0]["message_count"] == 4


def test_sessions_export_writes_where_asked(tmp_path, tiny_model_dir):
    ask = mlxchat("ask", "--session", "x/../y", "--model", str(tiny_model_dir),
                  "--max-tokens", "4", "hello")
    assert ask.returncode == 0, ask.stderr
    out = tmp_path / "exports" / "chat.md"
    proc = mlxchat("sessions", "export", "x/../y", "-o", str(out))  # no such folder
    assert proc.returncode == 1 and "does not exist: make it first" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.parent.exists()
    out.parent.mkdir()
    out.parent.chmod(0o755)
    proc = mlxchat("sessions", "export", "x/../y", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out) and "hello" in out.read_text()
    proc = mlxchat("sessions", "export", "x/../y", "-o", "here.md", cwd=out.parent)
    assert proc.returncode == 0 and (out.parent / "here.md").is_file(), proc.stderr
    assert out.parent.stat().st_mode & 0o777 == 0o755  # the user's folder keeps its mode
    folder = tmp_path / "jsons"
    folder.mkdir()
    proc = mlxchat("sessions", "export", "x/../y", "-f", "json", "-o", str(folder))
    written = list(folder.iterdir())
    assert proc.returncode == 0 and len(written) == 1
    assert written[0].name.endswith(".json") and "/" not in written[0].name[:-5]
