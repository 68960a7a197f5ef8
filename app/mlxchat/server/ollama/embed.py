"""Ollama's ``POST /api/embed`` (``input``: a string or a list) and the older
``POST /api/embeddings`` (one ``prompt``), answered by the server's embedder
(``server.core.embeddings``); and the model-management routes this server
does not have, each refused in Ollama's shape, in words."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.server.core import embeddings
from mlxchat.server.core.embeddings import Embeddings
from mlxchat.server.core.errors import ApiError, bad_field
from mlxchat.server.core.requests import parse_json
from mlxchat.server.core.service import ChatService
from mlxchat.server.core.streaming import read_body
from mlxchat.server.ollama.options import request_wide
from mlxchat.server.ollama.protocol import ollama_model
from mlxchat.server.ollama.replies import NS


def _checked(request: Request, data: dict[str, Any]) -> Embeddings:
    service: ChatService = request.app.state.service
    found: Embeddings = request.app.state.embeddings
    request_wide({**data, "stream": False})  # keep_alive checked
    options = data.get("options")
    if options not in (None, {}):
        raise bad_field("options", "'options' do not apply to the embedder; leave them out.")
    found.check_model(ollama_model(data), service)
    return found


async def embed(request: Request) -> Response:
    data = parse_json(await read_body(request))
    embedder = _checked(request, data)
    texts = embeddings.texts(data.get("input"), "input")
    dimensions = data.get("dimensions")  # checked before the work
    truncate = data.get("truncate", True)
    if not isinstance(truncate, bool):
        raise bad_field("truncate", "'truncate' must be true or false.")
    embeddings.check_dimensions(dimensions)
    done = await embedder.embed(texts, truncate=truncate)
    return JSONResponse({"model": data["model"], "embeddings": done.vectors.tolist(),
                         "total_duration": int(done.seconds * NS), "load_duration": 0,
                         "prompt_eval_count": done.tokens})


async def embeddings_route(request: Request) -> Response:
    data = parse_json(await read_body(request))
    embedder = _checked(request, data)
    prompt = data.get("prompt", "")
    if not isinstance(prompt, str):
        raise bad_field("prompt", "'prompt' must be a string.")
    if not prompt:  # as Ollama answers it
        return JSONResponse({"embedding": []})
    done = await embedder.embed([prompt], param="prompt")
    return JSONResponse({"embedding": done.vectors[0].tolist()})


async def not_here(request: Request) -> Response:
    """Pulling, creating, copying, deleting and pushing models, and their blobs."""
    what = request.url.path.removeprefix("/api/").split("/")[0]
    raise ApiError(501, f"/api/{what} is not supported: this server runs the one model it "
                   "was started with (mlxchat serve --model NAME); manage models with "
                   "`mlxchat models`.", code="not_supported")
