"""The app's tool loop on the real templates of the families that call tools
each their own way (Qwen3, Llama 3.1, gpt-oss, Mistral): the model's call
(forced: a tiny random model cannot choose one), read with its family's
parser, runs on a real MCP server; its result renders as the template writes
results and the turn that reads it prefills only the result."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mlxchat.engine.events import TurnDone
from mlxchat.session.root import open_conversation
from mlxchat.session.tool_loop import Consent
from mlxchat.store import open_store

from tests.scripted import Scripted
from tests.server.conftest import tiny_settings
from tests.tools.servers import host_for, ran

from .test_harmony_calls import THOUGHT
from .test_tool_results import CASES, _load

ARGS = {"city": "Paris"}
# Each family's call as its model writes one, the token that ends it, and how
# its template shows the result.
CALLS = {
    "qwen3": ("<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": ARGS})
              + "\n</tool_call>", "<|im_end|>", "<tool_response>"),
    "llama-3.1": (json.dumps({"name": "get_weather", "parameters": ARGS}), "<|eot_id|>",
                  "ipython"),
    "gpt-oss": (THOUGHT + "<|start|>assistant<|channel|>commentary to=functions.get_weather "
                f"<|constrain|>json<|message|>{json.dumps(ARGS)}", "<|call|>",
                "functions.get_weather"),
    "mistral-small-3.2": ("[TOOL_CALLS]get_weather[ARGS]" + json.dumps(ARGS), "</s>",
                          "[TOOL_RESULTS]"),
}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    markers = tmp_path_factory.mktemp("markers")
    running = host_for(markers, tmp_path_factory.mktemp("logs"))
    yield running, markers
    running.close()


def _finish(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_call_runs_and_its_result_extends_the_ledger(name, host, tmp_path_factory,
                                                       tmp_path, monkeypatch):
    running, markers = host
    loaded = _load(name, tmp_path_factory)
    settings = tiny_settings(300)
    settings.generation = replace(settings.generation, tools="t.get_weather")
    conv = open_conversation(settings, store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: loaded,
                             tool_host=running).conversation
    scripted = Scripted(loaded.tokenizer, monkeypatch)
    text, end, shown = CALLS[name]
    try:
        scripted.reply(text, end=end)
        asked = _finish(conv.turns.send(f"Weather in Paris? ({name})"))
        step = conv.tool_loop.step(asked, consent=lambda request: Consent("once"))
        assert step is not None, asked.reply
        assert ran(markers, "get_weather")[-1] == "Paris"
        assert conv.messages[1].tool_calls[0].arguments == ARGS
        result = conv.messages[2]
        rendered = loaded.tokenizer.decode(result.token_ids)
        assert "Sunny in Paris, 21 C" in rendered and shown in rendered
        scripted.reply("Sunny.", end=end if name != "gpt-oss" else "<|return|>")
        answered = _finish(step.turn)
        assert answered.stats.reused_tokens == asked.stats.prompt_tokens \
            + asked.stats.generated_tokens
        assert answered.stats.prefilled_tokens == len(result.token_ids)
    finally:
        conv.shutdown()
