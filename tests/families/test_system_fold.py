"""A template without a system role (Gemma 2 raises 'System role not
supported'): the system prompt is folded into the first user message, with a
one-line notice, and turns run as usual."""

from __future__ import annotations

import dataclasses

from mlxchat.chat import NO_SYSTEM_ROLE
from mlxchat.commands import CommandContext, default_registry
from mlxchat.config import Settings
from mlxchat.engine.events import TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

from . import templates
from .builders import FAMILIES, write_family_model

SYSTEM = "Answer in French."


def test_system_prompt_is_folded_into_the_first_message(tmp_path):
    gemma3 = next(f for f in FAMILIES if f.name == "gemma3")
    gemma2 = dataclasses.replace(gemma3, name="gemma2", template=templates.GEMMA2)
    loaded = load_folder(write_family_model(gemma2, tmp_path / "g2"))
    assert not loaded.info.system_role
    with_system = load_folder(write_family_model(gemma3, tmp_path / "g3"))
    assert with_system.info.system_role
    settings = Settings(system_prompt=SYSTEM,
                        generation=GenerationSettings(temperature=0.0, max_tokens=3))
    opened = open_conversation(settings, store_factory=lambda: open_store(tmp_path / "s.db"),
                               load_model=lambda spec, progress=None: loaded)
    assert any(NO_SYSTEM_ROLE in text.lower() for text, _ in opened.notices)
    conv = opened.conversation
    done = [e for e in conv.turns.send("Bonjour?") if isinstance(e, TurnDone)][0]
    assert done.stats.finish_reason in ("stop", "length")
    first = loaded.tokenizer.decode(conv.messages[0].token_ids)
    # One user turn that starts with the system prompt; no system turn.
    assert first.count("<start_of_turn>user\n") == 1
    assert f"<start_of_turn>user\n{SYSTEM}\n\nBonjour?<end_of_turn>" in first
    follow = [e for e in conv.turns.send("Encore?") if isinstance(e, TurnDone)][0]
    assert follow.stats.miss_reason is None  # the ledger goes on as usual
    said = default_registry().run("/system Be brief.", CommandContext(conversation=conv))
    assert said.ok and NO_SYSTEM_ROLE in said.text and "\n" not in said.text
    conv.shutdown()
