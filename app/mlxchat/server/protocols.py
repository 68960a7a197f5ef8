"""The wire protocols the server speaks: each one's ``api_router`` (its
``ROUTES``, and ``API``, its name). The app mounts these routes, and
``serve --help`` and the start line list them: a new protocol is its package
and one line here."""

from __future__ import annotations

from mlxchat.server.anthropic import api_router as anthropic_routes
from mlxchat.server.ollama import api_router as ollama_routes
from mlxchat.server.openai import api_router as openai_routes
from mlxchat.server.responses import api_router as responses_routes

PROTOCOLS = (openai_routes, responses_routes, anthropic_routes, ollama_routes)
