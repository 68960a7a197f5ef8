"""Anthropic's structured output (``output_config.format``) through the
``anthropic`` SDK against the real server: every reply that ends by itself
follows the schema, and a schema the engine cannot compile, or a format of
another shape, is a 400 in Anthropic's shape before any prefill."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.server.conftest import request, serve
from tests.server.test_anthropic import client
from tests.server.test_response_format import PERSON


@pytest.fixture
def roomy(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", max_tokens=120)
    yield running
    running.stop()


def test_every_reply_that_ends_follows_the_output_schema(roomy):
    api, ended = client(roomy.url), 0
    for i, temperature in enumerate((0.0, 1.0, 1.0, 1.0)):
        reply = api.messages.create(
            model="tiny", max_tokens=120,
            messages=[{"role": "user", "content": f"Person {i}, as JSON."}],
            output_config={"format": {"type": "json_schema", "schema": PERSON}},
            extra_body={"temperature": temperature})
        if reply.stop_reason == "end_turn":
            ended += 1
            jsonschema.validate(json.loads(reply.content[0].text), PERSON)
    assert ended >= 1


@pytest.mark.parametrize("fmt", [
    {"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}},
    {"type": "json_schema"},
    {"type": "text"},
])
def test_a_format_the_engine_cannot_follow_is_refused_before_any_prefill(roomy, fmt):
    before = roomy.conv.turns.last_stats
    reply = request(roomy.url, "POST", "/v1/messages", {
        "model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
        "output_config": {"format": fmt}})
    data = reply.json()
    assert reply.status == 400 and data["type"] == "error"
    assert data["error"]["type"] == "invalid_request_error" and data["error"]["message"]
    assert roomy.conv.turns.last_stats is before  # no turn ran
