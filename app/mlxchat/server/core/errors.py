"""Errors in the API's own shape: OpenAI's error object (``{"error": {message,
type, param, code}}``), Ollama's (``{"error": message}``) or Anthropic's
(``{"type": "error", "error": {type, message}}``), always with a status,
never a traceback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from starlette.responses import JSONResponse

from mlxchat.errors import MlxchatError

Dialect = Literal["openai", "ollama", "anthropic"]

ANTHROPIC_TYPES = {401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large",
                   429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}
"""Anthropic's error type for a status (any other is an invalid request)."""


@dataclass
class ApiError(MlxchatError):
    status: int
    message: str
    param: str | None = None
    code: str | None = None
    kind: str = "invalid_request_error"
    headers: dict[str, str] | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def response(self, dialect: Dialect = "openai") -> JSONResponse:
        if dialect == "ollama":
            return JSONResponse({"error": self.message}, self.status, headers=self.headers)
        if dialect == "anthropic":
            return JSONResponse(self.anthropic_body(), self.status, headers=self.headers)
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}
        return JSONResponse(body, self.status, headers=self.headers)


    def anthropic_body(self) -> dict[str, object]:
        kind = ANTHROPIC_TYPES.get(self.status, "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": self.message}}


def bad_field(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def missing_field(param: str) -> ApiError:
    return ApiError(400, f"'{param}' is required.", param=param, code="missing_required_parameter")


SHOWN_NAME_CHARS = 200
"""How much of a name a client sent is said back in an error."""


def unknown_model(name: str, served: str) -> ApiError:
    shown = name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS] + "…"
    return ApiError(404, f"The model '{shown}' does not exist; this server runs '{served}'.",
                    param="model", code="model_not_found")


def context_exceeded(text: str) -> ApiError:
    return ApiError(400, text, param="messages", code="context_length_exceeded")


def queue_full(retry_after_s: int) -> ApiError:
    return ApiError(503, "The server is busy: too many requests are waiting; retry later.",
                    code="queue_full", kind="server_error",
                    headers={"Retry-After": str(retry_after_s)})


def internal(text: str = "The server failed on this request; see its log.") -> ApiError:
    return ApiError(500, text, code="internal_error", kind="server_error")


def server_stopped() -> ApiError:
    """A turn the server's stop cut short (ctrl-c, /serve off): an error, never a
    reply that finished; the part already sent is stored as cancelled."""
    return ApiError(503, "The server stopped before the reply was finished.",
                    code="server_stopped", kind="server_error")
