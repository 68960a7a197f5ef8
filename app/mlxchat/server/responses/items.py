"""A Responses request's ``input`` (a string, or items) as the conversation the
service runs: ``message`` items of every role (``input_text``,
``output_text``, ``input_image`` parts), a reply's ``function_call`` items
joined to its message, ``function_call_output`` items as tool results (each
must answer a call before it, or one of the previous response's),
``reasoning`` items read back from their ``encrypted_content`` when it is ours.
Consecutive user messages are one user turn (Codex sends its environment and
the prompt as two). Every problem is one 400 naming the item."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from mlxchat.chat import Role
from mlxchat.server.core import images
from mlxchat.server.core.api_turns import IncomingMessage
from mlxchat.server.core.errors import bad_field, missing_field
from mlxchat.server.core.images import ImageBlob
from mlxchat.server.core.requests import tool_calls
from mlxchat.server.core.tool_calls import calls_signature
from mlxchat.server.responses.sealed import SealTooLarge, unseal
from mlxchat.server.responses.tools import Tools

log = logging.getLogger(__name__)

MAX_ITEMS = 8192
"""Input items one request may carry (a long agent session sends two per tool call)."""
TEXT_PARTS = ("input_text", "output_text", "refusal")
UNSEEN_IMAGE = "[an image the model is not shown here]"
"""A tool output's image, in its text (tool results show the model no images)."""
ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco",
               "reasoning": "rs"}


@dataclass
class _Draft:
    """A message being put together from consecutive items."""

    role: Role
    texts: list[str] = field(default_factory=list)
    calls: list[Any] = field(default_factory=list)
    blobs: list[ImageBlob] = field(default_factory=list)
    call_id: str | None = None
    tool_name: str | None = None
    reasoning: str | None = None

    def message(self) -> IncomingMessage:
        if self.role == "tool":
            signature = json.dumps([self.call_id or "", self.tool_name or ""],
                                   ensure_ascii=False)
            return IncomingMessage("tool", self.texts[0], signature, call_id=self.call_id,
                                   tool_name=self.tool_name)
        blobs = tuple(self.blobs)
        text = "\n\n".join(self.texts) if self.role in ("user", "system") \
            else "".join(self.texts)
        calls = tuple(self.calls)
        return IncomingMessage(self.role, text, calls_signature(calls) + images.signature(blobs),
                               calls, images=blobs, reasoning=self.reasoning)


@dataclass
class ReadInput:
    """The conversation a request's input makes."""

    system: str | None
    messages: list[IncomingMessage]
    listed: list[dict[str, Any]]
    """The input items as given, each with an id (``input_items``)."""


def _text(part: dict[str, Any], where: str) -> str:
    field_name = "refusal" if part.get("type") == "refusal" else "text"
    if not isinstance(part.get(field_name), str):
        raise bad_field(f"{where}.{field_name}", f"A {part.get('type')} part needs its "
                        f"'{field_name}' string.")
    return part[field_name]


def _image(part: dict[str, Any], where: str, allow_urls: bool) -> ImageBlob:
    if part.get("image_url") is None:
        raise bad_field(where, "An input_image needs its 'image_url' (a data URL); file ids "
                        "are not supported.")
    return images.from_url(part["image_url"], f"{where}.image_url", allow_urls=allow_urls)


def _parts(content: Any, where: str, role: str, allow_urls: bool
           ) -> tuple[list[str], list[ImageBlob]]:
    """A message's content (a string or parts) as its texts and images."""
    if isinstance(content, str):
        return [content], []
    if not isinstance(content, list):
        raise bad_field(f"{where}.content", "A message's content must be a string or a list "
                        "of content parts.")
    texts: list[str] = []
    blobs: list[ImageBlob] = []
    for i, part in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            texts.append(_text(part, at))
        elif kind == "input_image" and role == "user":
            blobs.append(_image(part, at, allow_urls))
        else:
            shown = f"'{kind}'" if isinstance(kind, str) else "a part without a type"
            raise bad_field(at, f"Content parts of type {shown} are not supported in a "
                            f"{role} message.")
    return texts, blobs


def _output_text(output: Any, where: str) -> str:
    """A function_call_output's output: a string, or text parts (an image noted)."""
    if isinstance(output, str):
        return output
    if not isinstance(output, list):
        raise bad_field(f"{where}.output", "'output' must be a string or a list of parts.")
    texts = []
    for i, part in enumerate(output):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_text":
            texts.append(_text(part, f"{where}.output[{i}]"))
        elif kind in ("input_image", "input_file"):
            texts.append(UNSEEN_IMAGE)
        else:
            raise bad_field(f"{where}.output[{i}]", "A tool output's parts must be "
                            "input_text (or input_image, input_file).")
    return "\n".join(texts)


class _Reader:
    """Items in order into messages (``_Draft``s)."""

    def __init__(self, tools: Tools, key: bytes, prior_calls: dict[str, str],
                 allow_urls: bool):
        self.tools, self.key, self.allow_urls = tools, key, allow_urls
        self.called = dict(prior_calls)
        """call_id -> the tool's name here: calls a function_call_output may answer."""
        self.system: list[str] = []
        self.drafts: list[_Draft] = []
        self.reasoning: str | None = None
        self.foreign = 0

    def _last(self, role: str) -> _Draft:
        if not self.drafts or self.drafts[-1].role != role or \
                (role == "assistant" and self.drafts[-1].calls):
            self.drafts.append(_Draft(role))  # type: ignore[arg-type]
        return self.drafts[-1]

    def message(self, item: dict[str, Any], where: str) -> None:
        role = item.get("role")
        if role not in ("developer", "system", "user", "assistant"):
            raise bad_field(f"{where}.role", "A message's role must be 'user', 'assistant', "
                            "'developer' or 'system'.")
        if "content" not in item:
            raise missing_field(f"{where}.content")
        texts, blobs = _parts(item["content"], where, role, self.allow_urls)
        if role in ("developer", "system"):
            if not self.drafts:
                self.system.extend(texts)
                return
            role = "system"  # where it stands: placed by ``core.system_messages``' rule
        draft = self._last(role)
        draft.texts.extend(texts)
        draft.blobs.extend(blobs)
        if role == "assistant" and self.reasoning is not None:
            draft.reasoning, self.reasoning = self.reasoning, None

    def function_call(self, item: dict[str, Any], where: str) -> None:
        for name in ("call_id", "name", "arguments"):
            if not isinstance(item.get(name), str):
                raise bad_field(f"{where}.{name}", f"A function_call needs its '{name}' string.")
        space = item.get("namespace")
        flat = self.tools.flat_name(item["name"], space if isinstance(space, str) else None)
        call = tool_calls([{"id": item["call_id"], "function": {
            "name": flat, "arguments": item["arguments"]}}], where)[0]
        draft = self.drafts[-1] if self.drafts and self.drafts[-1].role == "assistant" \
            else self._last("assistant")
        draft.calls.append(call)
        if self.reasoning is not None:
            draft.reasoning, self.reasoning = self.reasoning, None
        self.called[call.id] = flat

    def function_call_output(self, item: dict[str, Any], where: str) -> None:
        call_id = item.get("call_id")
        if not isinstance(call_id, str):
            raise bad_field(f"{where}.call_id", "A function_call_output needs its 'call_id'.")
        if call_id not in self.called:
            raise bad_field(f"{where}.call_id", f"No function_call with call_id {call_id!r} "
                            "comes before this function_call_output (in the input, or in "
                            "the previous response).")
        if "output" not in item:
            raise missing_field(f"{where}.output")
        draft = _Draft("tool", [_output_text(item["output"], where)], call_id=call_id,
                       tool_name=self.called[call_id])
        self.drafts.append(draft)

    def reasoning_item(self, item: dict[str, Any], where: str) -> None:
        sealed = item.get("encrypted_content")
        if sealed is None:
            return
        if not isinstance(sealed, str):
            raise bad_field(f"{where}.encrypted_content", "'encrypted_content' must be a "
                            "string.")
        try:
            opened = unseal(self.key, sealed)
        except SealTooLarge as exc:
            raise bad_field(f"{where}.encrypted_content", str(exc)) from None
        if opened is None:
            self.foreign += 1
        self.reasoning = opened


READERS = {"message": _Reader.message, "function_call": _Reader.function_call,
           "function_call_output": _Reader.function_call_output,
           "reasoning": _Reader.reasoning_item}


def _items(data: dict[str, Any]) -> list[Any]:
    if "input" not in data:
        raise missing_field("input")
    raw = data["input"]
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise bad_field("input", "'input' must be a string or a non-empty list of items.")
    if len(raw) > MAX_ITEMS:
        raise bad_field("input", f"'input' may hold at most {MAX_ITEMS:,} items; got "
                        f"{len(raw):,}.")
    return raw


def _listed(item: dict[str, Any], kind: str) -> dict[str, Any]:
    """The item as ``input_items`` lists it: with an id (its own, else a new one)."""
    listed = {**item, "type": kind}
    if kind == "message":
        listed.setdefault("status", "completed")
        if isinstance(item.get("content"), str):
            part = "output_text" if item.get("role") == "assistant" else "input_text"
            listed["content"] = [{"type": part, "text": item["content"]}]
    if not isinstance(item.get("id"), str):
        listed = {"id": f"{ID_PREFIXES[kind]}_{uuid.uuid4().hex}", **listed}
    return listed


def read_input(data: dict[str, Any], *, tools: Tools, key: bytes,
               instructions: str | None = None, prior_calls: dict[str, str] | None = None,
               allow_urls: bool = False, follows_reply: bool = False) -> ReadInput:
    """``instructions`` come first in the system prompt; ``prior_calls``: the
    previous response's calls (call_id -> name); ``follows_reply``: the input
    continues a stored reply (previous_response_id), whose system prompt stays."""
    reader = _Reader(tools, key, prior_calls or {}, allow_urls)
    if instructions:
        reader.system.append(instructions)
    listed = []
    for i, item in enumerate(_items(data)):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_field(where, "Each input item must be an object.")
        kind = item.get("type", "message" if "role" in item else None)
        if kind not in READERS:
            shown = f"'{kind}'" if isinstance(kind, str) else "an item without a type"
            raise bad_field(f"{where}.type", f"Input items of type {shown} are not supported "
                            "(message, function_call, function_call_output and reasoning "
                            "are).")
        READERS[kind](reader, item, where)
        listed.append(_listed(item, kind))
    if reader.foreign:
        log.info("responses: %d reasoning item(s) not ours (another server's): left aside",
                 reader.foreign)
    drafts = reader.drafts
    if not drafts or drafts[-1].role not in ("user", "tool", "system"):
        raise bad_field("input", "The input must end with a user message or "
                        "function_call_output items (continuing a reply is not supported).")
    if follows_reply and reader.system:  # the stored system prompt stays: these stand
        # after the reply (and the results that answer its calls), by the one rule.
        at = next((i for i, d in enumerate(drafts) if d.role != "tool"), len(drafts))
        drafts.insert(at, _Draft("system", list(reader.system)))
        reader.system = []
    system = "\n\n".join(reader.system) if reader.system else None
    return ReadInput(system, [d.message() for d in drafts], listed)
