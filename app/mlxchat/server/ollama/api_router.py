"""Ollama's routes: chat and the model list."""

from __future__ import annotations

from starlette.routing import Route

from mlxchat.server.ollama import chat

ROUTES = [
    Route("/api/chat", chat.chat, methods=["POST"]),
    Route("/api/tags", chat.tags, methods=["GET"]),
]
