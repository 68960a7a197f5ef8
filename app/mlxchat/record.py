"""The base of the dataclasses stored as JSON (settings, turn stats): stdlib only."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, Self


class Record:
    """A dataclass stored as JSON: unknown keys (from newer versions) are ignored."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Self:
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in (data or {}).items() if k in known})
