"""OpenAI's routes: chat completions, legacy completions, the model list, embeddings."""

from __future__ import annotations

from starlette.routing import Route

from mlxchat.server.openai import chat, completions, embeddings

API = "OpenAI"

ROUTES = [
    Route("/v1/chat/completions", chat.chat_completions, methods=["POST"]),
    Route("/v1/models", chat.models, methods=["GET"]),
    Route("/v1/completions", completions.completions, methods=["POST"]),
    Route("/v1/embeddings", embeddings.create, methods=["POST"]),
]
