"""``parallel_tool_calls`` on /v1/chat/completions: false keeps a reply's first
call (whole and streamed), stored as the client saw it; llama.cpp's forced
tool-call tests send it."""

from __future__ import annotations

import json

import pytest
from openai import OpenAI

from tests.scripted import Scripted
from tests.server.conftest import real_qwen3, serve

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
ONE = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'
TWO = ONE % "Oslo" + "\n" + ONE % "Rome"


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return real_qwen3(tmp_path_factory.mktemp("qwen3-parallel"))


@pytest.fixture
def served(qwen3, tmp_path):
    running = serve(qwen3, tmp_path / "s.db", max_tokens=200)
    yield running
    running.stop()


def _cities(calls) -> list[str]:
    return [json.loads(c.function.arguments)["city"] for c in calls or []]


def test_false_keeps_the_first_call(qwen3, served, monkeypatch):
    api = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=120)
    ask = [{"role": "user", "content": "Two cities?"}]
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    scripted.reply(TWO)
    both = api.chat.completions.create(model="tiny", messages=ask, tools=[WEATHER])
    assert _cities(both.choices[0].message.tool_calls) == ["Oslo", "Rome"]
    scripted.reply(TWO)
    first = api.chat.completions.create(model="tiny", messages=ask, tools=[WEATHER],
                                        parallel_tool_calls=False)
    assert _cities(first.choices[0].message.tool_calls) == ["Oslo"]
    assert len(served.conv.messages[-1].tool_calls) == 1  # stored as the client saw it
    scripted.reply(TWO)
    chunks = list(api.chat.completions.create(model="tiny", messages=ask, tools=[WEATHER],
                                              parallel_tool_calls=False, stream=True))
    names = [call.index for c in chunks if c.choices and c.choices[0].delta.tool_calls
             for call in c.choices[0].delta.tool_calls]
    assert set(names) == {0}


def test_a_value_that_is_not_a_flag_is_a_400(served):
    api = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(Exception) as refused:
        api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}],
                                    extra_body={"parallel_tool_calls": "yes"})
    assert getattr(refused.value, "status_code", None) == 400
    assert "parallel_tool_calls" in str(refused.value)
