"""A reply the request begins (assistant prefill): each real published
template renders the conversation with that reply left open exactly as
transformers' ``continue_final_message`` does, and the token ledger's
split of it (what the user message's ids give up, what the reply adds)
makes up the same ids."""

from __future__ import annotations

import pytest

from mlxchat.chat import Message
from mlxchat.engine.prompt.delta import TemplateOptions, head, opened_reply
from mlxchat.engine.prompt.jinja import hf_tokenizer
from mlxchat.engine.prompt.render import render
from mlxchat.models.info import takes_system

from .test_real_templates import case  # noqa: F401 - the fixture

PREFILL = "{\"answer\": \"Whi"
QUESTION = "What is the best book? Answer in JSON."


def _continued(loaded, messages: list[dict]) -> list[int]:
    """transformers' own render with the last message left open."""
    hf = hf_tokenizer(loaded.tokenizer)
    text = hf.apply_chat_template(messages, tokenize=False, continue_final_message=True)
    return hf.encode(text, add_special_tokens=False)


def test_an_open_reply_renders_as_transformers_continues_it(case):  # noqa: F811
    fam, loaded = case
    sys_prompt = fam.system if takes_system(loaded.tokenizer) else None
    system = [{"role": "system", "content": sys_prompt}] if sys_prompt else []
    asked = system + [{"role": "user", "content": QUESTION}]
    expected = _continued(loaded, asked + [{"role": "assistant", "content": PREFILL}])
    messages = ([Message("system", sys_prompt)] if sys_prompt else []) + [
        Message("user", QUESTION), Message("assistant", PREFILL)]
    assert render(loaded.tokenizer, messages, generation_prompt=False,
                  open_last=True) == expected
    # The ledger's way: the first message's ids (they end with the generation
    # prompt), less what the open reply replaces, then what it adds. (Without
    # the system prompt: Mistral's templates write it in the last user turn
    # only, which the ledger renders once, with it.)
    first = head(loaded.tokenizer, None, QUESTION, TemplateOptions())
    drop, added = opened_reply(loaded.tokenizer, PREFILL, TemplateOptions())
    assert first[:len(first) - drop] + added == _continued(
        loaded, [{"role": "user", "content": QUESTION},
                 {"role": "assistant", "content": PREFILL}])
    assert loaded.tokenizer.decode(added).endswith(PREFILL)


def test_control_text_in_a_prefill_stays_text(case):  # noqa: F811
    fam, loaded = case
    spelled = fam.specials[-1]
    drop, added = opened_reply(loaded.tokenizer, f"Say {spelled} now", TemplateOptions())
    specials = {loaded.tokenizer.convert_tokens_to_ids(t) for t in fam.specials}
    _, plain = opened_reply(loaded.tokenizer, "Say now", TemplateOptions())
    # The spelled control token adds no control id beyond what the template writes.
    assert {t for t in added if t in specials} == {t for t in plain if t in specials}


@pytest.mark.parametrize("text", ["Whill", " leading space", "ends with a newline\n"])
def test_prefill_text_is_kept_as_written(case, text):  # noqa: F811
    _, loaded = case
    _, added = opened_reply(loaded.tokenizer, text, TemplateOptions())
    assert loaded.tokenizer.decode(added).endswith(text)
