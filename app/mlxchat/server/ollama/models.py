"""What Ollama's clients ask about the models: ``GET /api/tags`` (the chat
model and the embedder), ``POST /api/show`` (details, template, parameters,
capabilities, model_info from the loaded model's config), ``GET /api/ps`` (the
loaded model, its memory, its context length) and ``GET /api/version``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.models import ModelInfo
from mlxchat.server.core import embeddings
from mlxchat.server.core.errors import bad_field
from mlxchat.server.core.requests import parse_json
from mlxchat.server.core.service import ChatService
from mlxchat.server.core.streaming import read_body
from mlxchat.server.ollama.facts import capabilities, model_info, parameters

OLLAMA_API_VERSION = "0.9.0"
"""The Ollama release whose API this server follows (thinking, tools, schemas,
/api/embed): clients that gate a feature on the version see these served."""
FOREVER = timedelta(days=106_000)
"""Ollama's expires_at for a model kept loaded (keep_alive -1): ~290 years on."""


def _started(request: Request) -> str:
    """When the server loaded its models (Ollama's modified_at)."""
    return datetime.fromtimestamp(request.app.state.started_at, timezone.utc).isoformat()


def parameter_size(count: int) -> str:
    """As Ollama writes it: '8.0B', '134.5M'."""
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"


def _details(info: ModelInfo) -> dict[str, Any]:
    return {"parent_model": "", "format": "mlx", "family": info.architecture,
            "families": [info.architecture],
            "parameter_size": parameter_size(info.parameter_count),
            "quantization_level": info.quantization}


def _embedder_details() -> dict[str, Any]:
    return {"parent_model": "", "format": "safetensors", "family": "bert", "families": ["bert"],
            "parameter_size": parameter_size(embeddings.embedder_bytes() // 4),  # float32
            "quantization_level": "F32"}


async def tags(request: Request) -> Response:
    service: ChatService = request.app.state.service
    info = service.conv.views.model_info
    when = _started(request)
    chat = {"name": service.model_id, "model": service.model_id, "modified_at": when,
            "size": info.weights_bytes, "digest": info.fingerprint, "details": _details(info)}
    embedder = {"name": embeddings.SHORT_NAME, "model": embeddings.SHORT_NAME,
                "modified_at": when, "size": embeddings.embedder_bytes(), "digest": "",
                "details": _embedder_details()}
    return JSONResponse({"models": [chat, embedder]})


def _asked_model(data: dict[str, Any]) -> str:
    name = data.get("model", data.get("name"))  # older clients send "name"
    if not isinstance(name, str) or not name:
        raise bad_field("model", "'model' is required: the name of the model to show.")
    return name


async def show(request: Request) -> Response:
    service: ChatService = request.app.state.service
    asked = _asked_model(parse_json(await read_body(request)))
    if asked in embeddings.NAMES:
        config = embeddings.embedder_config()
        return JSONResponse({
            "modelfile": "", "parameters": "", "template": "", "license": "Apache-2.0",
            "details": _embedder_details(), "capabilities": ["embedding"],
            "modified_at": _started(request),
            "model_info": {"general.architecture": "bert",
                           "bert.embedding_length": config.get("hidden_size"),
                           "bert.block_count": config.get("num_hidden_layers"),
                           "bert.context_length": embeddings.MAX_TOKENS,
                           "bert.attention.head_count": config.get("num_attention_heads")}})
    service.check_model(asked)
    info = service.conv.views.model_info
    loaded = service.engine.loaded
    return JSONResponse({
        "modelfile": "", "license": "",
        "template": getattr(loaded.tokenizer, "chat_template", None) or "",
        "parameters": parameters(info, service.conv.settings.generation, loaded.tokenizer,
                                 window=service.window),
        "details": _details(info), "capabilities": capabilities(info, loaded.tokenizer),
        "model_info": model_info(info, _config(info), window=service.window),
        "modified_at": _started(request)})


def _config(info: ModelInfo) -> dict[str, Any]:
    try:
        return json.loads((Path(info.path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


async def ps(request: Request) -> Response:
    service: ChatService = request.app.state.service
    info = service.conv.views.model_info
    size = info.needed_bytes or info.weights_bytes  # weights and the KV cache at the window
    return JSONResponse({"models": [{
        "name": service.model_id, "model": service.model_id, "size": size,
        "digest": info.fingerprint, "details": _details(info),
        "expires_at": (datetime.now(timezone.utc) + FOREVER).isoformat(),
        "size_vram": 0 if info.device == "cpu" else size,
        "context_length": service.window}]})


def _own_version() -> str:
    try:
        return metadata.version("mlxchat")
    except metadata.PackageNotFoundError:
        return "unknown"


async def version(request: Request) -> Response:
    return JSONResponse({"version": OLLAMA_API_VERSION, "server": f"mlxchat {_own_version()}"})
