"""How an Anthropic request asks a reply to think: ``thinking`` (``enabled``
with its ``budget_tokens``, ``adaptive``: the model's own choice, bounded by
the reasoning budget, or ``disabled``), its ``display`` (``summarized``: the
reasoning is sent as it is written, ``omitted``: thinking blocks come empty),
and ``output_config.effort`` (``core.reasoning``: a budget for models that
reason; ignored by the others)."""

from __future__ import annotations

from typing import Any

from mlxchat.server.core.errors import bad_field, missing_field
from mlxchat.server.core.reasoning import EFFORTS, effort_settings
from mlxchat.server.core.requests import whole_number

KINDS = ("enabled", "adaptive", "disabled")
DISPLAYS = ("summarized", "omitted")


def _effort(data: dict[str, Any], window: int | None) -> dict[str, Any]:
    config = data.get("output_config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise bad_field("output_config", "'output_config' must be an object.")
    effort = config.get("effort")
    if effort is None:
        return {}
    if effort not in EFFORTS:
        raise bad_field("output_config.effort", "'effort' must be one of "
                        + ", ".join(EFFORTS) + ".")
    return effort_settings(effort, window=window)


def _thinking(data: dict[str, Any]) -> dict[str, Any] | None:
    raw = data.get("thinking")
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind not in KINDS:
        raise bad_field("thinking", "'thinking' must be {\"type\": \"enabled\", "
                        "\"budget_tokens\": N}, {\"type\": \"adaptive\"} or "
                        "{\"type\": \"disabled\"}.")
    display = raw.get("display")
    if display is not None and display not in DISPLAYS:
        raise bad_field("thinking.display", "'display' must be 'summarized' or 'omitted'.")
    return raw


def thinking_settings(data: dict[str, Any], *, window: int | None = None) -> dict[str, Any]:
    """The generation settings ``thinking`` and ``output_config.effort`` ask
    for: an explicit budget wins over the effort's; adaptive leaves thinking
    to the model (its template's default)."""
    raw = _thinking(data)
    settings = _effort(data, window)
    if raw is None or raw["type"] == "adaptive":
        return settings
    if raw["type"] == "disabled":
        return {**settings, "thinking": False}
    budget = whole_number(raw, "budget_tokens", 1)
    if budget is None:
        raise missing_field("thinking.budget_tokens")
    return {**settings, "thinking": True, "max_reasoning_tokens": budget}


def omits_thinking(data: dict[str, Any]) -> bool:
    """``thinking.display`` is ``omitted``: thinking blocks are sent empty."""
    raw = _thinking(data)
    return raw is not None and raw.get("display") == "omitted"
