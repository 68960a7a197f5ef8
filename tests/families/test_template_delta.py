"""What one message adds to the ledger, on templates of real families."""

from __future__ import annotations

import datetime as dt

import pytest

from mlxchat.chat import Message
from mlxchat.engine.prompt import delta
from mlxchat.engine.prompt.delta import TemplateOptions
from mlxchat.engine.prompt.render import render
from mlxchat.models import load_folder

from .builders import FAMILIES, write_family_model

BY_NAME = {f.name: f for f in FAMILIES}


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    return load_folder(write_family_model(BY_NAME["llama3"], tmp_path_factory.mktemp("l3")))


def test_the_date_is_the_sessions_not_todays(llama3):
    started = dt.datetime(2024, 1, 5, 12).timestamp()
    ids = delta.head(llama3.tokenizer, "Be brief.", "Hi", TemplateOptions(date=started))
    text = llama3.tokenizer.decode(ids)
    assert "Today Date: 05 Jan 2024" in text
    today = dt.datetime.now().strftime("%d %b %Y")
    assert today not in text or today == "05 Jan 2024"


def test_a_follow_up_is_the_closing_the_user_turn_and_the_generation_prompt(llama3):
    tok = llama3.tokenizer
    options = TemplateOptions(date=0.0)
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    reply = tok.encode("Sure.", add_special_tokens=False)
    ended = delta.follow_up(tok, "Next?", previous=reply + [eot], options=options)
    cut = delta.follow_up(tok, "Next?", previous=reply, options=options)
    # A reply that stopped at its end token does not get a second one; a cut one does.
    assert cut == [eot] + ended
    assert tok.decode(ended) == "<|start_header_id|>user<|end_header_id|>\n\nNext?<|eot_id|>" \
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    # Laid end to end, the ledger equals what the template renders for that history.
    head = delta.head(tok, None, "Hi", options)
    whole = render(tok, [Message("user", "Hi"), Message("assistant", "Sure."),
                                Message("user", "Next?")], **options.kwargs())
    assert head + reply + cut == whole
