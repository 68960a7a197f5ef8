"""A tool's result as the model reads it: cut to its token budget with the cut
said, and the launcher's cut of an oversized message (before the app reads it)."""

from __future__ import annotations

import json

from mlxchat.tools import launch
from mlxchat.tools.outcome import cut_to_budget


def words(text: str) -> list[str]:
    return text.split(" ")


def join(ids) -> str:
    return " ".join(ids)


def test_a_result_within_its_budget_is_whole_and_one_over_it_is_cut_and_said():
    assert cut_to_budget("a b c", 8, encode=words, decode=join).cut is False
    text = " ".join(f"w{i}" for i in range(500))
    cut = cut_to_budget(text, 200, encode=words, decode=join)
    assert cut.cut and cut.total_tokens == 500 and cut.tokens <= 200
    assert cut.text.startswith("w0 w1 w2") and "it was 500 tokens; shown up to here" in cut.text
    assert len(words(cut.text)) <= 200


def test_a_huge_result_is_not_tokenized_whole():
    seen = []

    def counting(text: str) -> list[str]:
        seen.append(len(text))
        return words(text)
    cut = cut_to_budget("x " * 5_000_000, 50, encode=counting, decode=join)
    assert cut.cut and cut.total_tokens is None and "it was 10.0 MB" in cut.text
    assert max(seen) <= 50 * 16


def test_the_launcher_cuts_an_oversized_result_and_keeps_its_shape():
    text = "z" * 5000
    line = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {
        "content": [{"type": "text", "text": text}], "structuredContent": {"result": text},
        "isError": False}}).encode()
    cut = json.loads(launch.cut_message(line, 100))
    content = cut["result"]["content"]
    assert cut["id"] == 7 and content[0]["text"].startswith(launch.CUT_MARK)
    assert content[1]["text"] == "z" * 100 and cut["result"]["structuredContent"] == \
        {"result": "z" * 100}
    other = json.dumps({"jsonrpc": "2.0", "id": 8, "result": {"tools": ["x" * 500]}}).encode()
    error = json.loads(launch.cut_message(other, 100))
    assert error["id"] == 8 and "over mlxchat's limit of 100" in error["error"]["message"]
    assert launch.cut_message(b'{"jsonrpc": "2.0", "method": "x"', 10) is None
