"""What tool results add to the ledger, on real templates of the families
that render them each their own way: laid after the reply that called the
tools, they give exactly what the template renders for the whole exchange."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat.chat import CalledTool, Message
from mlxchat.engine.events import ContextOverflowError
from mlxchat.engine.prompt import delta
from mlxchat.engine.prompt.delta import TemplateOptions
from mlxchat.engine.prompt.fit import fit
from mlxchat.engine.prompt.render import TemplateRefused, render, template_call_id
from mlxchat.models import load_folder

from .builders import with_template, write_family_model

REAL = Path(__file__).parent / "real_templates"
CASES = {"qwen3": ("qwen3", "qwen3.jinja"), "llama-3.1": ("llama3", "llama-3.1.jinja"),
         "gpt-oss": ("gpt_oss", "gpt-oss.jinja"),
         "mistral-small-3.2": ("mistral", "mistral-small-3.2.jinja")}
CALL = CalledTool("get_weather", {"city": "Paris"}, "call_8f3a2b")
REPLY = Message("assistant", "", tool_calls=(CALL,))
RESULT = Message("tool", '{"sky": "clear"}', tool_call_id=CALL.id, tool_name=CALL.name)
TOOLS = ('[{"type": "function", "function": {"name": "get_weather", "description": "Weather",'
         ' "parameters": '
         '{"type": "object", "properties": {"city": {"type": "string"}}}}}]')


def _load(name: str, tmp_path_factory):
    base, file = CASES[name]
    family = with_template(base, (REAL / file).read_text(), name=name)
    return load_folder(write_family_model(family, tmp_path_factory.mktemp(name)))


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    return request.param, _load(request.param, tmp_path_factory)


def _generated(tok, head: list[int], reply: Message, options: TemplateOptions) -> list[int]:
    """The reply's ids as a model writes them: the template's (in history,
    followed by its results), through its end token."""
    rendered = render(tok, [Message("user", "Weather?"), reply, RESULT],
                             **options.kwargs())
    assert rendered[:len(head)] == head
    ends = set(tok.eos_token_ids)
    last = next(i for i in range(len(head), len(rendered)) if rendered[i] in ends)
    return rendered[len(head):last + 1]


def test_tool_results_extend_the_ledger_as_the_template_renders_them(case):
    name, loaded = case
    tok = loaded.tokenizer
    options = TemplateOptions(date=0.0, tools=TOOLS)
    head = delta.head(tok, None, "Weather?", options)
    reply = _generated(tok, head, REPLY, options)
    added = delta.tool_results(tok, [RESULT], reply=REPLY, previous=reply,
                                        options=options)
    whole = render(tok, [Message("user", "Weather?"), REPLY, RESULT], **options.kwargs())
    assert head + reply + added == whole
    text = tok.decode(added)
    assert "sky" in text and "clear" in text and "Stub" not in text
    if name == "gpt-oss":  # the result is addressed from the tool the reply called
        assert "functions.get_weather" in text
    if name == "mistral-small-3.2":  # ids as Mistral's template insists on: 9 characters
        assert f"[TOOL_RESULTS]{template_call_id(CALL.id)}[TOOL_CONTENT]" in text


def test_several_results_and_a_reply_without_calls(tmp_path_factory):
    tok = _load("qwen3", tmp_path_factory).tokenizer
    options = TemplateOptions(date=0.0, tools=TOOLS)
    second = CalledTool("get_weather", {"city": "Oslo"}, "call_2")
    reply = Message("assistant", "Checking both.", tool_calls=(CALL, second))
    results = [RESULT, Message("tool", "snow", tool_call_id="call_2", tool_name=CALL.name)]
    added = delta.tool_results(tok, results, reply=reply, previous=[1],
                                        options=options)
    text = tok.decode(added)
    assert text.count("<tool_response>") == 2 and "snow" in text and "Oslo" not in text
    assert text.startswith("<|im_end|>")  # a reply cut short gets the template's closing
    plain = Message("assistant", "I will look.")
    added = delta.tool_results(tok, [RESULT], reply=plain, previous=[1],
                                        options=options)
    assert "<tool_response>" in tok.decode(added) and "look" not in tok.decode(added)


def test_a_template_that_refuses_results_without_a_call_says_so(tmp_path_factory):
    tok = _load("gpt-oss", tmp_path_factory).tokenizer
    plain = Message("assistant", "No tools needed.")
    with pytest.raises(TemplateRefused, match="no previous assistant message"):
        delta.tool_results(tok, [RESULT], reply=plain, previous=[1],
                                    options=TemplateOptions(date=0.0))


def test_an_over_long_tool_loop_is_refused_or_cut_before_the_reply_that_called(case):
    """Over the window, the results and the reply that called them stay one
    unit: "stop" says the context is exceeded (no template refusal), and
    drop_oldest never leaves a result without its call."""
    name, loaded = case
    tok = loaded.tokenizer
    loop = [Message("user", "Weather?"), REPLY, RESULT]
    window = len(render(tok, loop))  # the reply's reserve (1) does not fit
    with pytest.raises(ContextOverflowError, match="the context window is"):
        fit(tok, loop, window=window, max_tokens=1, policy="stop")
    fitted = fit(tok, loop, window=window, max_tokens=1, policy="drop_oldest")
    assert fitted.messages == [REPLY, RESULT] and fitted.dropped == 1
    earlier = [Message("user", "Hi " * 40), Message("assistant", "Hello."), *loop]
    window = len(render(tok, earlier)) - 2
    fitted = fit(tok, earlier, window=window, max_tokens=1, policy="drop_oldest")
    assert fitted.messages == loop and fitted.dropped == 2
    assert fitted.tokens == render(tok, loop)
