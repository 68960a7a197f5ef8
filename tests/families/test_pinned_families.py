"""A pinned prefix on every family: sliding windows that wrap inside the
document (Gemma 3, also without a system role so the system part folds into
the first user turn; gpt-oss), recurrent layers (Qwen3-Next), templates that
stamp dates or strip reasoning. The prefix is saved at its own end, so loading
it gives the reply computing it gives."""

from __future__ import annotations

import pytest

from mlxchat import paths
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.models import load_folder
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

from . import templates
from .builders import FAMILIES, with_template, write_family_model

DOC = " ".join(f"Fact {i} is {i * 3}." for i in range(30))


def _family(name: str):
    if name == "gemma2":
        return with_template("gemma3", templates.GEMMA2, name="gemma2")
    return next(f for f in FAMILIES if f.name == name)


@pytest.mark.parametrize("name", ["gemma2", *(f.name for f in FAMILIES)])
def test_a_loaded_prefix_answers_as_a_computed_one(name, tmp_path):
    loaded = load_folder(write_family_model(_family(name), tmp_path / name))
    doc = tmp_path / "facts.txt"
    doc.write_text(DOC)
    replies = []
    for _ in range(2):
        settings = Settings(system_prompt="Use the facts.")
        settings.generation.temperature = 0.0
        settings.generation.max_tokens = 6
        conv = Conversation(settings=settings, store=open_store(tmp_path / "s.db"),
                            engine=ChatEngine(loaded), model_spec=name)
        conv.pins.pin(doc, DOC)
        n = len(conv.pins.prefix_tokens())
        done = [e for e in conv.turns.send("What is fact 7?") if isinstance(e, TurnDone)][-1]
        replies.append((conv.pins.last_prefix.how, done.stats.reused_tokens, done.token_ids))
        conv.close()
    (how_a, reused_a, ids_a), (how_b, reused_b, ids_b) = replies
    assert (how_a, reused_a) == ("computed", 0) and (how_b, reused_b) == ("loaded", n)
    assert n > 24  # longer than any sliding window here: it wrapped inside the document
    assert ids_b == ids_a
    assert len(list(paths.kv_dir().glob("prefix-*.safetensors"))) == 1
