"""A stored response continued after the server restarts: a real ``mlxchat
serve`` process answers, stops, starts again, and the ``previous_response_id``
follow-up is read on the saved KV, prefilling only its new input; what was
stored is read and listed by the ``openai`` SDK from the new process."""

from __future__ import annotations

import signal

from openai import OpenAI

from mlxchat.store import open_store

from tests.server.served_process import ServeProcess, end_all


def _client(served: ServeProcess) -> OpenAI:
    return OpenAI(base_url=f"http://127.0.0.1:{served.port}/v1", api_key="unused",
                  max_retries=0, timeout=120)


def test_previous_response_id_after_a_restart_prefills_only_the_new_input(tiny_model_dir):
    model = tiny_model_dir.name
    started: list[ServeProcess] = []
    try:
        first = ServeProcess(tiny_model_dir)
        started.append(first)
        made = _client(first).responses.create(model=model, instructions="Be brief.",
                                               input="Tell me about pelicans.",
                                               max_output_tokens=6)
        assert first.end(signal.SIGTERM) == 0

        second = ServeProcess(tiny_model_dir)
        started.append(second)
        api = _client(second)
        assert api.responses.retrieve(made.id).output_text == made.output_text
        follow = api.responses.create(model=model, input="And herons?", max_output_tokens=6,
                                      previous_response_id=made.id, instructions="Be brief.")
        cached = follow.usage.input_tokens_details.cached_tokens
        assert cached == made.usage.input_tokens + made.usage.output_tokens
        listed = api.responses.input_items.list(follow.id)
        assert [part.text for item in listed.data for part in item.content] == ["And herons?"]
        assert second.end(signal.SIGTERM) == 0
    finally:
        end_all(started)
    store = open_store()
    session = next(s for s in store.list_sessions() if s.message_count)
    messages = store.get_session(session.id).messages
    store.close()
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    # What the follow-up prefilled is exactly what its new message added.
    assert follow.usage.input_tokens - cached == len(messages[2].token_ids)
