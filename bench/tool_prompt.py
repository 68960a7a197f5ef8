"""Does the generic tool prompt make the bundled model call tools?

SmolLM2's chat template renders no tools: without help the model never sees
them. For each prompt below the model answers greedily (temperature 0) once
with the tools as its template renders them (nothing: the baseline) and once
with the generic tool prompt (``models.tool_prompt``) through the engine's
own render; the reply is read with the parser the tool loop uses.

- ``call_rate_fit``: share of prompts a tool fits where the reply holds a
  readable call (``right_tool``: of the right tool; ``valid_args``: of the
  right tool, its arguments fitting the schema).
- ``call_rate_unfit``: share of prompts no tool fits where it called one anyway.

The last line is:
ratios: baseline_call_rate_fit=X generic_call_rate_fit=X generic_right_tool=X
        generic_valid_args=X baseline_call_rate_unfit=X generic_call_rate_unfit=X
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

from mlxchat.chat import Message  # noqa: E402
from mlxchat.engine.prompt.render import GENERIC_TOOLS, render  # noqa: E402
from mlxchat.models import load_model  # noqa: E402
from mlxchat.models.tools import ToolCall, split_tool_calls  # noqa: E402
from mlxchat.tools.catalog import ToolInfo, argument_problem, definition  # noqa: E402

TOOLS = [
    ToolInfo("b", "get_weather", "Get the current weather in a city.",
             {"type": "object", "properties": {"city": {"type": "string",
                                                        "description": "The city's name"}},
              "required": ["city"]}),
    ToolInfo("b", "convert_currency", "Convert an amount of money from one currency to another.",
             {"type": "object", "properties": {
                 "amount": {"type": "number"}, "from_currency": {"type": "string"},
                 "to_currency": {"type": "string"}},
              "required": ["amount", "from_currency", "to_currency"]}),
    ToolInfo("b", "search_files", "Search the user's files for a word or phrase.",
             {"type": "object", "properties": {"query": {"type": "string"}},
              "required": ["query"]}),
]
FIT = [  # (prompt, the tool that fits)
    ("What's the weather in Paris right now?", "get_weather"),
    ("Is it raining in London today?", "get_weather"),
    ("Tell me the current weather for Tokyo.", "get_weather"),
    ("How warm is it in Madrid at the moment?", "get_weather"),
    ("Weather in Oslo?", "get_weather"),
    ("Do I need an umbrella in Seattle today?", "get_weather"),
    ("How many euros is 100 US dollars?", "convert_currency"),
    ("Convert 50 GBP to USD.", "convert_currency"),
    ("What is 2000 yen in euros?", "convert_currency"),
    ("I have 30 Swiss francs, how much is that in dollars?", "convert_currency"),
    ("Find my notes about the budget meeting.", "search_files"),
    ("Search my files for 'invoice 2023'.", "search_files"),
    ("Where did I write about the garden project?", "search_files"),
    ("Look through my documents for the word kubernetes.", "search_files"),
    ("Which of my files mention Alice?", "search_files"),
    ("Check the weather in Berlin and tell me if I need a coat.", "get_weather"),
    ("What's the temperature in New York?", "get_weather"),
    ("Convert 12.5 euros into Canadian dollars.", "convert_currency"),
    ("Find the file where I saved my passwords list.", "search_files"),
    ("Is it sunny in Rome?", "get_weather"),
]
UNFIT = [
    "What is the capital of France?",
    "Write a haiku about autumn.",
    "What is 7 times 8?",
    "Who wrote Romeo and Juliet?",
    "Explain what a noun is in one sentence.",
    "Say hello.",
    "Give me a synonym for happy.",
    "What colour is the sky on a clear day?",
    "Name three fruits.",
    "How many days are in a week?",
]


def reply(loaded, text: str, *, tools: list | None, max_tokens: int) -> str:
    from mlx_lm import generate
    from mlx_lm.sample_utils import make_sampler

    ids = render(loaded.tokenizer, [Message("user", text)],
                 **({"tools": tools, GENERIC_TOOLS: True} if tools else {}))
    return generate(loaded.model, loaded.tokenizer, ids, max_tokens=max_tokens,
                    sampler=make_sampler(0.0))


def calls_in(loaded, text: str) -> list[ToolCall]:
    return [p for p in split_tool_calls(loaded.tokenizer, text) if isinstance(p, ToolCall)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-tokens", type=int, default=60)
    ap.add_argument("--show", action="store_true", help="print every reply")
    ap.add_argument("--only", choices=("baseline", "generic"), help="one of the two runs")
    args = ap.parse_args()
    loaded = load_model(args.model)
    defs = [definition(t.name, t) for t in TOOLS]
    by_name = {t.name: t for t in TOOLS}
    figures: dict[str, float] = {}
    for label, tools in (("baseline", None), ("generic", defs)):
        if args.only and label != args.only:
            continue
        called = right = valid = 0
        for prompt, wanted in FIT:
            text = reply(loaded, prompt, tools=tools, max_tokens=args.max_tokens)
            calls = calls_in(loaded, text)
            called += bool(calls)
            hit = [c for c in calls if c.name == wanted]
            right += bool(hit)
            valid += any(argument_problem(by_name[wanted], c.arguments) is None for c in hit)
            if args.show:
                print(f"[{label} fit] {prompt!r} -> {text!r}")
        unfit = 0
        for prompt in UNFIT:
            text = reply(loaded, prompt, tools=tools, max_tokens=args.max_tokens)
            unfit += bool(calls_in(loaded, text))
            if args.show:
                print(f"[{label} unfit] {prompt!r} -> {text!r}")
        figures[f"{label}_call_rate_fit"] = called / len(FIT)
        figures[f"{label}_right_tool"] = right / len(FIT)
        figures[f"{label}_valid_args"] = valid / len(FIT)
        figures[f"{label}_call_rate_unfit"] = unfit / len(UNFIT)
        print(f"{label}: {called}/{len(FIT)} prompts a tool fits got a readable call "
              f"({right} the right tool, {valid} with valid arguments); "
              f"{unfit}/{len(UNFIT)} prompts no tool fits got one", flush=True)
    keys = ("baseline_call_rate_fit", "generic_call_rate_fit", "generic_right_tool",
            "generic_valid_args", "baseline_call_rate_unfit", "generic_call_rate_unfit")
    print("ratios: " + " ".join(f"{k}={figures[k]:.2f}" for k in keys if k in figures))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
