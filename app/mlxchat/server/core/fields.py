"""What a route does with each field its protocol defines, in one table per
route: served, accepted and left aside on purpose (each with why), or
refused by name. A refused field given a value that asks for something is a
400 naming it; given its default (null, false, ...) it asks for nothing and
passes. A field the protocol does not define is a client's or a vendor's
extra (``extra_body``): accepted and left aside, as OpenAI's own server does
with fields it does not know."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from mlxchat.server.core.errors import ApiError


@dataclass(frozen=True)
class Refused:
    """A field the protocol defines and this server does not honour."""

    why: str
    """Why, in a few words (the refusal's second half)."""
    inert: tuple[Any, ...] = (None,)
    """Values that ask for nothing (accepted)."""
    allows: Callable[[Any], bool] | None = None
    """Other values that ask for nothing this server does not do (accepted)."""

    def asks(self, value: Any) -> bool:
        """``value`` asks for what this server does not do."""
        if any(value == v and type(value) is type(v) for v in self.inert):
            return False
        return self.allows is None or not self.allows(value)


@dataclass(frozen=True)
class FieldTable:
    """One route's fields."""

    route: str
    served: tuple[str, ...]
    ignored: dict[str, str] = field(default_factory=dict)
    """Accepted and left aside on purpose: field -> why that changes nothing."""
    refused: dict[str, Refused] = field(default_factory=dict)

    def check(self, data: dict[str, Any]) -> None:
        """A 400 naming the first refused field that asks for something."""
        for name, value in data.items():
            rule = self.refused.get(name)
            if rule is not None and rule.asks(value):
                raise ApiError(400, f"'{name}' is not supported by this server: {rule.why}.",
                               param=name, code="unsupported_parameter")

    def names(self) -> list[str]:
        """Every field the table names (the docs list each)."""
        return [*self.served, *self.ignored, *self.refused]
