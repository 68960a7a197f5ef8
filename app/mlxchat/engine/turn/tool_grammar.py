"""Tool calls that follow their tools: a grammar (llguidance's Lark, with the
tools' JSON schemas inline) for the call markup the model's family writes
and the engine parses back (``models.tools``).

- Lazy (``tool_choice`` auto): the reply is free text until it writes the
  family's call-open marker; the call's body must then be one of the tools,
  its ``arguments`` following that tool's ``input_schema``, closed by the
  end marker; after it the text is free again.
- Forced (``any``, or one named tool): the reply is one such call, from its
  first token, and ends after it.

Families whose calls are a JSON object ``{"name", "arguments"}`` between
markers (Qwen's and Hermes' ``<tool_call>``, mlx-lm's ``json_tools`` parser,
and the generic tool prompt's) are constrained; for the others a lazy call
stays free and a forced one is refused before any prefill.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from mlxchat.engine.turn.constrained import (
    MAX_SCHEMA_BYTES,
    CompiledFormat,
    OutputFormat,
    SchemaError,
    parser_limits,
    reason_line,
    end_token,
    grammar_tokenizer,
)
from mlxchat.models.tools import call_markup

ANY = "*"
"""``ToolChoice.name`` when any one of the tools must be called."""
_JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""How these templates write a call's JSON (``{"name": "f", "arguments": {...}}``)."""


@dataclass(frozen=True)
class ToolChoice:
    """Which tool calls a reply must make."""

    name: str | None = None
    """None: the model chooses (calls it opens follow their schemas); ``ANY``:
    one call to any of the tools; a tool's name: one call to that tool."""

    @property
    def forced(self) -> bool:
        return self.name is not None


def _json_bodied(tokenizer: Any) -> tuple[str, str] | None:
    """The family's call markers when a call's body is the JSON object."""
    markup = call_markup(tokenizer)
    if markup is None or markup.end is None:
        return None
    parser = getattr(tokenizer, "tool_parser", None)
    module = getattr(parser, "__module__", "") or ""
    if parser is not None and not module.endswith("json_tools"):
        return None
    return markup.start, markup.end


def _marker(tokenizer: Any, text: str) -> tuple[str, tuple[int, ...]]:
    """A marker as Lark writes it (its one token by id, else its text) and its ids."""
    ids = tuple(tokenizer.encode(text, add_special_tokens=False))
    return (f"<[{ids[0]}]>" if len(ids) == 1 else json.dumps(text)), ids


def _call_schema(tools: list[dict[str, Any]], name: str | None) -> dict[str, Any]:
    """A call's JSON: one of the tools (or the one named) with its arguments."""
    options = []
    for tool in tools:
        fn = tool.get("function", {})
        if name not in (None, ANY) and fn.get("name") != name:
            continue
        params = fn.get("parameters")
        options.append({"type": "object", "additionalProperties": False,
                        "required": ["name", "arguments"],
                        "properties": {"name": {"const": fn.get("name")},
                                       "arguments": params if isinstance(params, dict)
                                       else {"type": "object"}}})
    if not options:
        raise SchemaError(f"tool_choice names {name!r}, which is not one of the tools")
    one = options[0] if len(options) == 1 else {"anyOf": options}
    return {**one, "x-guidance": _JSON_STYLE}


_COMPILED: dict[tuple[int, str, str | None], tuple[Any, CompiledFormat | None]] = {}
_COMPILED_LOCK = threading.Lock()


def compile_tools(tokenizer: Any, tools_json: str | None,
                  choice: ToolChoice) -> CompiledFormat | None:
    """``compile_tools_once``, kept for the next request with the same tools
    (an agent sends the same ones at every step; a few sets are kept)."""
    key = (id(tokenizer), tools_json or "", choice.name)
    with _COMPILED_LOCK:
        held = _COMPILED.get(key)
    if held is not None and held[0] is tokenizer:
        return held[1]
    built = compile_tools_once(tokenizer, tools_json, choice)
    with _COMPILED_LOCK:
        if len(_COMPILED) >= 8:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = (tokenizer, built)
    return built


def compile_tools_once(tokenizer: Any, tools_json: str | None,
                       choice: ToolChoice) -> CompiledFormat | None:
    """The grammar tool calls follow for ``tools_json`` (OpenAI's ``tools``, as
    the request's canonical JSON); None when nothing is constrained. Raises
    SchemaError (one line) when a forced choice cannot be, or a tool's schema
    does not compile."""
    tools = json.loads(tools_json) if tools_json else []
    if not tools:  # before the import: a request without tools never pays for it
        if choice.forced:
            raise SchemaError("tool_choice asks for a tool call, but the request gives no tools")
        return None
    import llguidance
    markers = _json_bodied(tokenizer)
    if markers is None:
        if choice.forced:
            raise SchemaError("tool_choice asks for a tool call, which this model's tool-call "
                              "markup cannot be held to (only JSON calls in <tool_call> markup, "
                              "as Qwen and Hermes write them)")
        return None
    schema = _call_schema(tools, choice.name)
    body = json.dumps(schema, ensure_ascii=False)
    if len(body) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"the tools' schemas are {len(body):,} bytes of JSON; at most "
                          f"{MAX_SCHEMA_BYTES:,} are compiled")
    (open_lark, open_ids), (end_lark, _) = (_marker(tokenizer, m) for m in markers)
    call = f'/[ \\n]{{0,2}}/ %json {body} /[ \\n]{{0,2}}/ {end_lark}'
    lark = f"start: {open_lark} {call}\n" if choice.forced else f"start: {call}\n"
    table = grammar_tokenizer(tokenizer)
    matcher = llguidance.LLMatcher(table, lark, log_level=0, limits=parser_limits())
    if matcher.is_error():
        raise SchemaError(f"the tools' input schemas cannot be compiled: "
                          f"{reason_line(matcher.get_error())}")
    return CompiledFormat(OutputFormat(schema, "tools"), matcher, table.vocab_size,
                          end_token(tokenizer), opens=() if choice.forced else open_ids)
