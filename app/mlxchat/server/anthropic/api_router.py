"""Anthropic's routes: the Messages API and its token count."""

from __future__ import annotations

from starlette.routing import Route

from mlxchat.server.anthropic import messages

API = "Anthropic"

ROUTES = [
    Route("/v1/messages", messages.messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"]),
]
