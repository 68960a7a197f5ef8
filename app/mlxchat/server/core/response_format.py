"""What a reply must look like, as a request asks it: OpenAI's
``response_format`` (``json_schema`` or ``json_object``) and Ollama's
``format`` (a schema, or ``"json"``), compiled before the turn is placed so a
schema the engine cannot compile is a 400 with its reason, before any prefill.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool

from mlxchat.engine.turn.constrained import (
    CompiledFormat,
    OutputFormat,
    SchemaError,
    compile_format,
)
from mlxchat.server.core.errors import ApiError, bad_field


def openai_format(data: dict[str, Any]) -> OutputFormat | None:
    """``response_format`` of a chat or completion request (None: free text)."""
    given = data.get("response_format")
    if given is None:
        return None
    if not isinstance(given, dict) or not isinstance(given.get("type"), str):
        raise bad_field("response_format", "'response_format' must be an object with a "
                        "'type': 'text', 'json_object' or 'json_schema'.")
    kind = given["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat.any_object()
    if kind != "json_schema":
        raise bad_field("response_format", f"Unknown response_format type {kind!r}: use "
                        "'text', 'json_object' or 'json_schema'.")
    spec = given.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
        raise bad_field("response_format", "'response_format.json_schema' must be an object "
                        "with a 'name' and a 'schema' object.")
    name = spec.get("name", "")
    # strict or not, the reply follows the schema: constrained decoding cannot half-follow.
    return OutputFormat(spec.get("schema") or {}, name if isinstance(name, str) else "")


def ollama_format(data: dict[str, Any]) -> OutputFormat | None:
    """Ollama's ``format``: ``"json"`` or a JSON schema (None or "": free text)."""
    given = data.get("format")
    if given is None or given == "":
        return None
    if given == "json":
        return OutputFormat.any_object()
    if not isinstance(given, dict):
        raise bad_field("format", "'format' must be \"json\" or a JSON schema object.")
    return OutputFormat(given)


def anthropic_format(data: dict[str, Any]) -> OutputFormat | None:
    """Anthropic's ``output_config.format`` (``{"type": "json_schema", "schema"}``;
    the beta's top-level ``output_format`` too). None: free text."""
    config = data.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise bad_field("output_config", "'output_config' must be an object.")
    given, param = ((config or {}).get("format"), "output_config.format")
    if given is None and "output_format" in data:
        given, param = data["output_format"], "output_format"
    if given is None:
        return None
    if not isinstance(given, dict) or given.get("type") != "json_schema" \
            or not isinstance(given.get("schema"), dict):
        raise bad_field(param, f"'{param}' must be {{\"type\": \"json_schema\", \"schema\": "
                        "{...}}.")
    return OutputFormat(given["schema"])


async def compiled(tokenizer: Any, fmt: OutputFormat | None,
                   param: str) -> CompiledFormat | None:
    """``fmt`` compiled for the served model's tokenizer, off the event loop;
    an ApiError (400, ``param``) with the compiler's reason when it cannot be."""
    if fmt is None:
        return None
    try:
        return await run_in_threadpool(compile_format, tokenizer, fmt)
    except SchemaError as exc:
        raise ApiError(400, str(exc), param=param,
                       code="invalid_schema") from None
