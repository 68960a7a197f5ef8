"""The Responses API's routes."""

from __future__ import annotations

from starlette.routing import Route

from mlxchat.server.responses import serving

API = "OpenAI Responses"

ROUTES = [
    Route("/v1/responses", serving.create, methods=["POST"]),
    Route("/v1/responses/{response_id}", serving.retrieve, methods=["GET"]),
    Route("/v1/responses/{response_id}", serving.delete, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/input_items", serving.input_items, methods=["GET"]),
]
