"""llama.cpp's own server tests against `mlxchat serve` (issue 47's peer suite).

Runs test_chat_completion, test_completion, test_basic, test_compat_anthropic,
test_security, test_ctx_shift and the fast part of test_tool_call (not marked
slow) of llama.cpp's ``tools/server/tests``: the copy in
bench/data/llamacpp-server-tests (commit 13628d8, MIT, unchanged; SOURCE.md
there), or another checkout's with ``--llamacpp-tests DIR``; their server
start replaced by ours (bench/peer_plugin.py), on the bundled model. Each failure is classed by its first failing assertion:

- **llama.cpp-only**: it asked for one of their own endpoints (``/completion``,
  ``/tokenize``, ``/slots``, ``/props``, ...), sent one of their own fields
  (``grammar``, ``n_probs``, ``cache_prompt``, ...), read one of their own
  reply fields (``timings``, ``system_fingerprint`` "b..." builds,
  ``tokens``, ...), a CORS value or a model alias of theirs (``--alias``),
  named a model ours does not serve (theirs answers any name; ours a 404, as
  OpenAI's), asked their ``/models`` without the key, or set a server option of
  theirs that ours does not have (``chat_template``, ``jinja`` ...). Their
  ``n_ctx`` is ours: ``serve --context`` at their window per conversation,
  ``n_ctx // n_slots`` (bench/peer_plugin.py's ``window``; the model's window
  where that is below the least ``--context`` or above the model's);
- **the model's words**: every request was answered 2xx and the assertion is
  about what the model wrote or how many tokens it counted (a tiny story model
  of theirs against SmolLM2 here);
- **ours**: anything else, a protocol failure (``peer_protocol_failures``,
  printed with each test id and its first assertion).

    .venv/bin/python bench/peer_suite.py [--llamacpp-tests DIR] [--model M] [-k EXPR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

VENDORED = Path(__file__).resolve().parent / "data" / "llamacpp-server-tests"
"""Their tests as of llama.cpp 13628d8, MIT-licensed, unchanged (SOURCE.md there)."""

FILES = ["test_chat_completion.py", "test_completion.py", "test_basic.py",
         "test_compat_anthropic.py", "test_security.py", "test_ctx_shift.py",
         "test_tool_call.py"]
LLAMA_PATHS = {"/completion", "/completions", "/tokenize", "/detokenize", "/slots", "/props",
               "/metrics", "/apply-template", "/infill", "/embedding", "/embeddings",
               "/rerank", "/reranking", "/v1/rerank", "/lora-adapters", "/",
               "/v1/health", "/models/load", "/models/unload"}
LLAMA_FIELDS = {"n_predict", "n_probs", "grammar", "json_schema", "cache_prompt", "id_slot",
                "samplers", "typical_p", "mirostat", "dry_multiplier", "dry_base",
                "xtc_probability", "ignore_eos", "return_tokens", "post_sampling_probs",
                "timings_per_token", "t_max_predict_ms", "n_indent", "n_keep", "n_discard",
                "chat_template_kwargs", "reasoning_format", "parse_tool_calls", "lora",
                "return_progress", "n_cmpl", "add_special", "with_pieces", "response_fields",
                "dynatemp_range", "repeat_penalty", "repeat_last_n", "penalty_last_n",
                "top_n_sigma", "thinking_forced_open", "n_ctx", "slot_id", "min_keep"}
LLAMA_REPLY = re.compile(
    r"""system_fingerprint|["'](timings|tokens|n_probs|completion_probabilities|probs|"""
    r"""generation_settings|model_path|total_slots|__verbose|tokens_cached|truncated|"""
    r"""prompt_progress|n_ctx|id_slot|stop_type|stopping_word|tokens_predicted|"""
    r"""tokens_evaluated|has_new_line|cache_n|prompt_n|predicted_n|chat_format|"""
    r"""exceed_context_size_error|n_prompt_tokens|n_ctx_slot|"""
    r"""Access-Control-Allow-(?:Credentials|Methods|Headers))["']""")
WORDS = re.compile(r"match_regex|content|\btext\b|n_prompt|n_predicted|tool_calls?|"
                   r"finish_reason|stop_reason|arguments|\bname\b|thinking|reasoning")
"""What the model wrote, or how many tokens it counted (their expected numbers)."""
FIRST_CHUNK = re.compile(r"""content["'\]]* is None|Expected non empty content delta""")
"""Their streams' first chunk says content null, and no chunk an empty one;
OpenAI's first says "" for text (null when the reply is a tool call)."""


FEATURES = {"model_hf_repo", "model_hf_file", "model_file", "media_path", "lora_files",
            "model_draft", "slot_save_path", "pooling", "server_slots", "enable_ctx_shift",
            "n_ga", "n_ga_w", "kv_unified", "fa", "no_webui"}
"""Their server's features ours has no match for (another model, local media
files, LoRA, slots, context shift): a test that sets one is theirs alone."""
RENDERING = {"chat_template", "chat_template_file", "reasoning_format", "reasoning_budget"}
"""How their server renders the prompt (``jinja`` off too): ours renders the
model's own template, so what the model then writes differs; a refusal does not."""
THEIR_CHOICES = {
    "test_anthropic_empty_messages": "Anthropic's API refuses an empty messages list; "
                                     "theirs answers it",
    "test_anthropic_vision_format_accepted": "theirs fails an image to a model without vision "
                                             "with a 500; ours is a 400 saying so",
    "test_server_models": "theirs serves one model; ours lists the embedding model "
                          "/v1/embeddings serves after the chat model (as OpenAI lists its "
                          "embedding models), typed 'embeddings'",
}
"""Tests of a behaviour their server chose against the API it follows."""


def _options(record: dict, names: set[str]) -> list[str]:
    options = record.get("options", {})
    return [k for k in options if k in names]


def llama_only(record: dict) -> bool:
    """Their own endpoint, field, reply field, CORS value, model alias (--alias),
    a model name they answer whatever it is (ours: a 404, as OpenAI's), their
    /models without the key, their first stream chunk for text, or a download
    of their test media (nothing is fetched here)."""
    requests = record.get("requests", [])
    line = " ".join((record.get("line", ""), record.get("crash", ""), record["id"]))
    # A forced call (tool_choice "required" or a name): OpenAI's first chunk says null.
    calls = any(r.get("forced", "required_tool" in record["id"] or None) for r in requests)
    return (any(r["path"] in LLAMA_PATHS for r in requests)
            or bool(_options(record, FEATURES))
            or record["id"].split("::")[-1].split("[")[0] in THEIR_CHOICES
            or any(set(r["fields"]) & LLAMA_FIELDS for r in requests)
            or bool(LLAMA_REPLY.search(line)) or "Access-Control-Allow-" in record["id"]
            or "model_alias" in line
            or any(r["status"] == 404 and "does not exist; this server runs" in r.get("error", "")
                   for r in requests)
            or any(r["status"] == 401 and r["path"] == "/v1/models" for r in requests)
            or (bool(FIRST_CHUNK.search(line + record.get("message", ""))) and not calls)
            or "NameResolutionError" in record.get("message", ""))  # their media download


def classify(record: dict) -> str:
    """'llama.cpp', 'model' or 'ours' for a failed test's record."""
    requests = record.get("requests", [])
    if llama_only(record):
        return "llama.cpp"
    if record.get("crash"):  # their utils' checks of the wire format (a stream's chunks)
        return "ours"
    if requests and any(r["status"] >= 400 for r in requests):
        return "ours"  # refused on a route and with fields both servers have
    if WORDS.search(record.get("line", "")):
        return "model"
    jinja_off = record.get("options", {}).get("jinja") == "False"
    if _options(record, RENDERING) or jinja_off:
        return "llama.cpp"
    return "ours"


def run(tests: Path, model: str, select: str | None, out: Path) -> int:
    home = Path(tempfile.mkdtemp(prefix="mlxchat-peer-"))
    env = {**os.environ, "PEER_TESTS": str(tests), "PEER_OUT": str(out),
           "PEER_MODEL": model, "PEER_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                          os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "peer_plugin",
            "-m", "not slow", "--rootdir", str(tests), "-o", "addopts=",
            *[str(tests / "unit" / f) for f in FILES]]
    if select:
        args += ["-k", select]
    return subprocess.call(args, env=env, cwd=tests, stdout=subprocess.DEVNULL)


def report(out: Path) -> None:
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    outcomes = Counter(r["outcome"] for r in records)
    failed = [r for r in records if r["outcome"] == "failed"]
    classes = Counter(classify(r) for r in failed)
    print(f"load: {os.getloadavg()[0]:.1f}; {len(records)} tests: {outcomes['passed']} passed, "
          f"{len(failed)} failed, {outcomes['skipped']} skipped")
    print(f"failures: {classes['model']} the model's words, {classes['llama.cpp']} "
          f"llama.cpp-only endpoints/fields/options, {classes['ours']} ours")
    for r in failed:
        if classify(r) == "ours":
            print(f"  ours: {r['id']}\n        {r.get('line', '')}\n        "
                  f"{r.get('message', '').splitlines()[0] if r.get('message') else ''}")
    print(f"peer_protocol_failures={classes['ours']} (goal 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llamacpp-tests", type=Path, metavar="DIR", default=VENDORED,
                        help="a llama.cpp checkout's tools/server/tests (default: the copy "
                        "in bench/data/llamacpp-server-tests, llama.cpp 13628d8)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("-k", dest="select", help="only the tests pytest's -k selects")
    parser.add_argument("--out", type=Path, help="keep the per-test records here (JSON lines)")
    parser.add_argument("--report-only", action="store_true",
                        help="class the records of an earlier --out without running")
    args = parser.parse_args()
    tests = args.llamacpp_tests.resolve()
    if not (tests / "utils.py").is_file() or not (tests / "unit").is_dir():
        parser.error(f"{tests} is not llama.cpp's tools/server/tests (no utils.py, unit/)")
    out = args.out or Path(tempfile.mkdtemp(prefix="mlxchat-peer-out-")) / "records.jsonl"
    if not args.report_only:
        out.unlink(missing_ok=True)
        run(tests, args.model, args.select, out)
    report(out)


if __name__ == "__main__":
    main()
