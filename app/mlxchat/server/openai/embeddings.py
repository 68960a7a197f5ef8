"""OpenAI's ``POST /v1/embeddings``: ``input`` a string or a list of strings,
``encoding_format`` float or base64 (what the openai client asks for by
default), ``usage``; answered by the server's embedder (``server.core.embeddings``)."""

from __future__ import annotations

import base64

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.server.core import embeddings
from mlxchat.server.core.embeddings import Embeddings
from mlxchat.server.core.errors import bad_field
from mlxchat.server.core.requests import model_name, parse_json
from mlxchat.server.core.service import ChatService
from mlxchat.server.core.streaming import read_body


async def create(request: Request) -> Response:
    service: ChatService = request.app.state.service
    embedder: Embeddings = request.app.state.embeddings
    data = parse_json(await read_body(request))
    model = model_name(data)
    embedder.check_model(model, service)
    texts = embeddings.texts(data.get("input"), "input")
    encoding = data.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise bad_field("encoding_format", "'encoding_format' must be 'float' or 'base64'.")
    embeddings.check_dimensions(data.get("dimensions"))
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise bad_field("user", "'user' must be a string.")
    done = await embedder.embed(texts)
    rows = [base64.b64encode(v.astype("<f4").tobytes()).decode() if encoding == "base64"
            else v.tolist() for v in done.vectors]
    return JSONResponse({
        "object": "list", "model": embedder.name,
        "data": [{"object": "embedding", "index": i, "embedding": row}
                 for i, row in enumerate(rows)],
        "usage": {"prompt_tokens": done.tokens, "total_tokens": done.tokens}})
