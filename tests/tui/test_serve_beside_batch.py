"""The chat beside the server (`mlxchat serve --tui`) is a member of the API's
batch: with a chat reply and an API reply streaming together in the same
steps, quitting the app keeps both replies (marked stopped, as a reply cut at
quit always is), and the batch closes after its members."""

from __future__ import annotations

import asyncio
import threading
from functools import partial

from mlxchat.server.options import ServeOptions
from mlxchat.store import open_store

from .app_support import ready, start_long_reply, tiny_app, tiny_settings, until
from .test_serve_beside import PacedEngine, client

API_Q = "Tell me a long story."


async def test_quitting_while_the_chat_and_a_client_stream_together_keeps_both(tmp_path,
                                                                                tiny):
    db = tmp_path / "s.db"
    # Every engine is paced (5 ms a piece; the API's slots are of its first
    # engine's kind): both replies are still running at quit however fast this
    # machine is, the API's after the chat's stopped too.
    app = tiny_app(db, tiny, settings=tiny_settings(max_tokens=2000),
                   engine_factory=PacedEngine, serve=ServeOptions(port=0, parallel=2))
    app.serving.control.engine_factory = partial(PacedEngine, compute_owner="api")
    streamed = threading.Event()
    pieces: list[str] = []

    def stream_a_long_reply(url: str) -> None:
        chunks = client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": API_Q}],
            max_tokens=2000, stream=True)
        try:
            for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                    streamed.set()
        except Exception:  # noqa: BLE001 - the server went away mid-stream: expected
            pass

    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        server = app.serving.running
        batch = server.batch
        assert batch is not None and "2 requests at once" in server.describe()
        await start_long_reply(app, "Tell me everything about rivers.")
        chat_session = app.conversation.session.id
        reader = threading.Thread(target=stream_a_long_reply, args=(server.url,), daemon=True)
        reader.start()
        assert await asyncio.to_thread(streamed.wait, 30)
        await until(lambda: batch.members == 2)
        shared_from = batch.steps
        await until(lambda: batch.steps >= shared_from + 3)  # steps of both together
        assert batch.widest == 2 and app.generating
        app.simulate_key("ctrl+q")
        await until(lambda: not app.is_running, 60)
    reader.join(30)
    assert batch.members == 0 and app.serving.running is None
    store = open_store(db)
    try:
        chat_reply = store.get_session(chat_session).messages[-1]
        api = next(s for s in store.list_sessions() if s.title.startswith(API_Q[:12]))
        api_reply = store.get_session(api.id).messages[-1]
    finally:
        store.close()
    assert chat_reply.role == "assistant" and chat_reply.cancelled and chat_reply.content
    assert api_reply.role == "assistant" and api_reply.cancelled
    assert api_reply.content.startswith("".join(pieces)) and api_reply.content
