"""How much a reply may think when a request names an effort (Anthropic's
``output_config.effort``, the Responses API's ``reasoning.effort``): a
reasoning budget scaled from the engine's own default
(``GenerationSettings.max_reasoning_tokens``, what the chat uses), and the
effort itself for templates that take one (gpt-oss). A model that does not
reason ignores both."""

from __future__ import annotations

from typing import Any

from mlxchat.generation import GenerationSettings

DEFAULT_BUDGET = GenerationSettings().max_reasoning_tokens
EFFORT_SCALE = {"minimal": 0.125, "low": 0.25, "medium": 1.0, "high": 4.0}
"""An effort's reasoning budget as a multiple of the default; ``max``: the window."""
EFFORTS = (*EFFORT_SCALE, "max")
TEMPLATE_EFFORT = {"minimal": "low", "max": "high"}
"""Efforts templates do not name, as the nearest they do (gpt-oss: low/medium/high)."""


def effort_settings(effort: str, *, window: int | None) -> dict[str, Any]:
    """The generation settings ``effort`` (one of ``EFFORTS``) asks for: the
    reasoning budget (``max``: the whole window, or 32 times the default
    where the window is not known yet) and the template's effort."""
    budget = (window or 32 * DEFAULT_BUDGET) if effort == "max" \
        else max(1, round(DEFAULT_BUDGET * EFFORT_SCALE[effort]))
    return {"max_reasoning_tokens": budget,
            "reasoning_effort": TEMPLATE_EFFORT.get(effort, effort)}
