"""The API served beside a chat (``server/beside.py``) without the app: the
shared weights are the chat's model only, the API engine never re-casts them,
and a failed start leaves no thread behind."""

from __future__ import annotations

import socket
import threading

import pytest

from mlxchat.models.loader import load_folder
from mlxchat.models.tiny import write_tiny_model
from mlxchat.server.beside import SharedServer
from mlxchat.server.options import ServeOptions
from mlxchat.server.runner import ServerFailed
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

from tests.server.conftest import tiny_settings


@pytest.fixture(scope="module")
def tiny_d(tmp_path_factory):
    """Another random llama with the same tokenizer: a draft for ``tiny``."""
    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-d"), seed=1),
                       name="tiny-d", spec="tiny-d")


@pytest.fixture
def chat(tmp_path, tiny, tiny_d):
    models = {m.info.spec: m for m in (tiny, tiny_d)}
    conv = open_conversation(tiny_settings(4), model_spec="tiny",
                             store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: models[spec]).conversation
    yield conv
    conv.shutdown()


@pytest.fixture
def shared(chat):
    server = SharedServer(chat, ServeOptions(port=0))
    yield server
    server.stop()


def test_the_api_loads_a_draft_as_itself_not_as_the_chat_model(shared, tiny, tiny_d):
    api = shared.conversation
    assert api.set_draft("tiny-d") == "tiny-d"
    assert api.engine.draft_spec == "tiny-d"
    assert api.engine.draft_info.name == "tiny-d"


def lanes() -> int:
    return sum(t.name == "mlxchat-api-lane" and t.is_alive() for t in threading.enumerate())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # uvicorn's exit
def test_a_server_that_cannot_bind_leaves_no_thread_behind(chat):
    before = lanes()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ServerFailed, match="is the port in use"):
            SharedServer(chat, ServeOptions(port=taken.getsockname()[1]))
    assert lanes() == before
