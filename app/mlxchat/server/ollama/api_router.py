"""Ollama's routes: chat and generate, the models' descriptions, embeddings,
and the model-management routes refused in words."""

from __future__ import annotations

from starlette.routing import Route

from mlxchat.server.ollama import chat, embed, models

API = "Ollama"

ROUTES = [
    Route("/api/chat", chat.chat, methods=["POST"]),
    Route("/api/generate", chat.generate, methods=["POST"]),
    Route("/api/tags", models.tags, methods=["GET"]),
    Route("/api/show", models.show, methods=["POST"]),
    Route("/api/ps", models.ps, methods=["GET"]),
    Route("/api/version", models.version, methods=["GET"]),
    Route("/api/embed", embed.embed, methods=["POST"]),
    Route("/api/embeddings", embed.embeddings_route, methods=["POST"]),
    *(Route(path, embed.not_here, methods=["POST", "DELETE", "HEAD"], include_in_schema=False)
      for path in ("/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete",
                   "/api/blobs/{digest}")),
]
