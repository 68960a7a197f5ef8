"""The generic tool prompt, for chat templates that render no tools (SmolLM2's
ChatML among them): the definitions go into the system prompt as JSON with
the call format, a call comes back as ``<tool_call>JSON</tool_call>`` (the
Hermes/Qwen markup, read with mlx-lm's ``json_tools`` parser), earlier calls
are written into their reply's text and results go back as a user message.
llama.cpp (minja's polyfills) does the same for such templates. Here it is
opt-in (the ``tool_prompt`` setting): the bundled model never followed it.

Whether a template renders tools is found by rendering it with and without
one and comparing the tokens.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"

_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_tool_xq", "description": "Probe whether the template renders tools.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
_PROBE = [{"role": "user", "content": "?"}]

SECTION = """You can call tools. The tools, as JSON:
{tools}

To call a tool, answer with only this, nothing before it:
<tool_call>{{"name": "TOOL_NAME", "arguments": {{"ARGUMENT": "VALUE"}}}}</tool_call>
The result comes back in the next message. Call a tool only when the question needs one;
otherwise answer in plain words."""
"""The system prompt's part for the tools (the call format is the one parsed back)."""

RESULT_HEAD = "Tool result"

MEASURED = "the bundled SmolLM2-135M called a tool for 0 of 20 questions that needed one"
"""What the generic prompt did for the bundled model (``bench/tool_prompt.py``)."""
SPEAKS_TOOLS = "a model whose template speaks tools (Qwen3, Llama 3.1+, Mistral)"


def template_note(model: str, *, generic: bool, switch: str) -> str:
    """What the user is told when ``model``'s template has no place for tools:
    what the model gets, and what works (``switch``: how to turn the generic
    prompt on)."""
    head = f"{model}'s chat template has no place for tools"
    if generic:
        return (f"{head}: they are described in the system prompt (tool_prompt generic), "
                f"which small models seldom follow ({MEASURED}); {SPEAKS_TOOLS} calls them.")
    return (f"{head}: the model does not see them and cannot call one. Use {SPEAKS_TOOLS}, or "
            f"{switch} to describe them in the system prompt ({MEASURED}).")


def _render(tokenizer: Any, tools: list | None) -> list[int]:
    kwargs = {"tools": tools} if tools else {}
    out = tokenizer.apply_chat_template(list(_PROBE), add_generation_prompt=True,
                                        tokenize=True, **kwargs)
    return list(out)


@lru_cache(maxsize=16)
def renders_tools(tokenizer: Any) -> bool:
    """Whether the chat template shows tool definitions at all: a render with
    one differs from a render without. A template that fails either render is
    taken as it is (True): its own error is what the user should see."""
    try:
        return _render(tokenizer, [_PROBE_TOOL]) != _render(tokenizer, None)
    except Exception:  # noqa: BLE001 - any template error: not ours to polyfill
        return True


def section(tools: list[dict[str, Any]]) -> str:
    """The system prompt's part that describes ``tools`` (OpenAI-style definitions)."""
    listed = [t.get("function", t) for t in tools]
    return SECTION.format(tools=json.dumps(listed, ensure_ascii=False, indent=1))


def call_text(calls: list[dict[str, Any]]) -> str:
    """A reply's calls (OpenAI shape) as the model is told to write them."""
    out = []
    for call in calls:
        function = call.get("function", {})
        out.append(CALL_START + json.dumps({"name": function.get("name"),
                                            "arguments": function.get("arguments")},
                                           ensure_ascii=False) + CALL_END)
    return "".join(out)


def _result_text(message: dict[str, Any]) -> str:
    name = message.get("name") or "tool"
    return f"{RESULT_HEAD} ({name}):\n{message.get('content') or ''}"


def polyfilled(dicts: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages (as templates read them) for a template without tools: the
    tools' section in the system message (added when there is none), calls
    in their reply's text, consecutive results as one user message."""
    text = section(tools)
    out: list[dict[str, Any]] = []
    if dicts and dicts[0]["role"] == "system":
        out.append({"role": "system", "content": f"{dicts[0]['content']}\n\n{text}"})
        dicts = dicts[1:]
    else:
        out.append({"role": "system", "content": text})
    for message in dicts:
        if message["role"] == "tool":
            if out[-1].get("_results"):
                out[-1]["content"] += "\n\n" + _result_text(message)
            else:
                out.append({"role": "user", "content": _result_text(message), "_results": True})
            continue
        if message.get("tool_calls"):
            calls = message["tool_calls"]
            message = {k: v for k, v in message.items() if k != "tool_calls"}
            message["content"] = (message.get("content") or "") + call_text(calls)
        out.append(message)
    return [{k: v for k, v in m.items() if k != "_results"} for m in out]
