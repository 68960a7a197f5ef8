"""The embeddings the API serves (OpenAI's /v1/embeddings, Ollama's /api/embed
and /api/embeddings): the sentence encoder document collections already use,
all-MiniLM-L6-v2 (bundled), not the chat model's pooled hidden state.
bench/embeddings.py, 24 paraphrase pairs: the paraphrase ranked first 24/24
times against 22/24, a cosine gap between paraphrases and unrelated pairs of
0.72 against 0.13, and 50 sentences a second against 1.5 for the bundled chat
model (which would also take the engine's lane from the chats). It runs off
the lane and off the event loop, one request at a time, loaded on first use."""

from __future__ import annotations

import json
import threading
import time
import zipfile
from dataclasses import dataclass
from typing import Any, Callable

import anyio
import numpy as np

from mlxchat.docs.embedder import DEFAULT_EMBEDDER, MAX_TOKENS, default_embedder
from mlxchat.docs import DocsError
from mlxchat.docs.word_pieces import bundled_model_zip
from mlxchat.server.core.errors import ApiError, bad_field
from mlxchat.server.core.service import ChatService

NAMES = (DEFAULT_EMBEDDER, "all-minilm", "all-minilm:l6-v2", "all-minilm:latest",
         "sentence-transformers/all-MiniLM-L6-v2")
"""What a request may call the embedder: its own name and Ollama's."""
SHORT_NAME = "all-minilm:l6-v2"
"""Its name as Ollama lists it."""
MAX_INPUTS = 2048
"""Inputs one request may give (OpenAI's own limit)."""


@dataclass
class Embedded:
    vectors: np.ndarray
    """(inputs, dims) float32, each row of unit length."""
    tokens: int
    """Word pieces read, special ones included (what usage counts)."""
    seconds: float


class Embeddings:
    """The embedder, loaded on the first request that needs it."""

    name = DEFAULT_EMBEDDER

    def __init__(self, load: Callable[[], Any] = default_embedder):
        self._load = load
        self._loading = threading.Lock()
        self._model: Any = None
        self._limiter = anyio.CapacityLimiter(1)

    def check_model(self, asked: str, service: ChatService) -> None:
        """A 400 when ``asked`` is ``service``'s chat model, a 404 when it is neither."""
        if asked in NAMES:
            return
        try:
            service.check_model(asked)
        except ApiError:
            chat_model = False
        else:
            chat_model = True
        if chat_model:
            raise ApiError(400, f"'{asked}' is the chat model; it does not embed here. This "
                           f"server's embeddings come from {DEFAULT_EMBEDDER}: name it "
                           f"'{SHORT_NAME}' or '{DEFAULT_EMBEDDER}'.", param="model",
                           code="model_not_embedding")
        raise ApiError(404, f"The model '{asked[:200]}' does not exist; this server embeds "
                       f"with '{SHORT_NAME}' ({DEFAULT_EMBEDDER}) and chats with "
                       f"'{chat_model}'.", param="model", code="model_not_found")

    def _model_now(self) -> Any:
        with self._loading:
            if self._model is None:
                try:
                    self._model = self._load()
                except DocsError as exc:
                    raise ApiError(503, exc.user_text(), code="embedder_unavailable",
                                   kind="server_error") from None
            return self._model

    def _embed(self, texts: list[str], truncate: bool, param: str) -> Embedded:
        start = time.perf_counter()
        model = self._model_now()
        encoded = model.tokenizer.encode_batch(texts)
        for i, found in enumerate(encoded):
            if found.overflowing and not truncate:
                raise bad_field(f"{param}[{i}]", f"'{param}[{i}]' is longer than the "
                                f"{MAX_TOKENS} word pieces {DEFAULT_EMBEDDER} reads; shorten "
                                "it, or let it be cut (truncate: true).")
        vectors = model.embed(texts)
        return Embedded(vectors, sum(len(e.ids) for e in encoded),
                        time.perf_counter() - start)

    async def embed(self, texts: list[str], *, truncate: bool = True,
                    param: str = "input") -> Embedded:
        """``texts`` embedded (each cut at the model's 256 word pieces unless
        ``truncate`` is false, then a 400 naming the input)."""
        return await anyio.to_thread.run_sync(self._embed, texts, truncate, param,
                                              limiter=self._limiter)


def texts(value: Any, param: str) -> list[str]:
    """A string or a list of strings (1 to ``MAX_INPUTS``), else a 400 naming
    ``param``; token ids are refused: they would be read in this embedder's
    vocabulary, not the one the client counted them in."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        raise bad_field(param, f"'{param}' must be a string or a non-empty list of strings.")
    if len(value) > MAX_INPUTS:
        raise bad_field(param, f"'{param}' may hold at most {MAX_INPUTS:,} inputs; "
                        f"got {len(value):,}.")
    if all(isinstance(v, str) for v in value):
        return value
    if all(isinstance(v, int) or isinstance(v, list) for v in value):
        raise bad_field(param, f"'{param}' as token ids is not supported: they would be read "
                        f"in {DEFAULT_EMBEDDER}'s vocabulary, not the tokenizer that counted "
                        "them; send the text (LangChain: check_embedding_ctx_length=False).")
    raise bad_field(param, f"'{param}' must be a string or a list of strings.")


def check_dimensions(asked: Any) -> None:
    """``dimensions``: the embedder's own (or none); it is not trained to be cut."""
    dims = embedder_config().get("hidden_size")
    if asked is not None and asked != dims:
        raise bad_field("dimensions", f"'dimensions' must be {dims} (or left out): "
                        f"{DEFAULT_EMBEDDER} gives {dims} and is not trained to be cut shorter.")


def embedder_config() -> dict[str, Any]:
    """The bundled embedder's config.json, read alone from its model.zip ({}: none)."""
    try:
        with zipfile.ZipFile(bundled_model_zip()) as zf:
            return json.loads(zf.read("config.json"))
    except (OSError, KeyError, zipfile.BadZipFile, ValueError, DocsError):
        return {}


def embedder_bytes() -> int:
    """The size of the bundled embedder's weights (0: not installed)."""
    try:
        with zipfile.ZipFile(bundled_model_zip()) as zf:
            return zf.getinfo("model.safetensors").file_size
    except (OSError, KeyError, zipfile.BadZipFile, DocsError):
        return 0
