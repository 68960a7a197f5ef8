"""A model's own default sampling: what its publisher recommends (the folder's
``generation_config.json``), or what the catalog measured for it. A session's
sampling setting left unset (None) follows it; set, it wins."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

#: Where a model says nothing: mlx-lm's own defaults but for a warmer temperature.
FALLBACK = {"temperature": 0.7, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0}


@dataclass(frozen=True)
class ModelSampling:
    temperature: float | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    source: str = ""
    """Where they come from, in words ('generation_config.json', 'the catalog:
    measured on 10 questions'); '' when the model names none."""

    def values(self) -> dict[str, float]:
        """Each setting's default for this model (the fallback where it names none)."""
        return {f.name: value if (value := getattr(self, f.name)) is not None
                else FALLBACK[f.name] for f in fields(self) if f.name in FALLBACK}

    def named(self) -> set[str]:
        """The settings this model gives a default for."""
        return {name for name in FALLBACK if getattr(self, name) is not None}


def _number(value: Any, low: float, high: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if low <= value <= high else None


def from_mapping(data: Any, source: str) -> ModelSampling:
    """Sampling from a table (catalog) or a generation_config; values out of range
    are ignored, never trusted."""
    if not isinstance(data, dict):
        return ModelSampling()
    temperature = _number(data.get("temperature"), 0.0, 100.0)
    if data.get("do_sample") is False:
        temperature = 0.0  # greedy, as transformers reads it
    found = ModelSampling(temperature=temperature,
                          top_p=_number(data.get("top_p"), 1e-6, 1.0),
                          min_p=_number(data.get("min_p"), 0.0, 0.999),
                          repetition_penalty=_number(data.get("repetition_penalty"), 1e-3, 10.0),
                          source=source)
    return found if found.named() else ModelSampling()


def from_folder(folder: Path) -> ModelSampling:
    """The folder's ``generation_config.json`` (a Hugging Face checkpoint's)."""
    path = Path(folder) / "generation_config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return ModelSampling()
    return from_mapping(data, "the model's generation_config.json")
