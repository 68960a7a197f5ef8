"""A message far past the window, typed or pasted in the app or given to
`ask`, is refused before it is tokenized: one line, nothing stored."""

from __future__ import annotations

import dataclasses

import pytest

from mlxchat.engine.events import ContextOverflowError

from tests.server.conftest import open_tiny


@pytest.mark.parametrize("history", ["ledger", "template"])
def test_a_15_mb_message_is_refused_from_its_floor(tiny, tmp_path, history):
    conv = open_tiny(tiny, tmp_path / "s.db")
    try:
        if history == "template":
            conv.update_generation(dataclasses.replace(conv.session.settings,
                                                       history="template"))
        huge = "All work and no play makes a dull model.\n" * (15_000_000 // 41)
        with pytest.raises(ContextOverflowError) as refused:
            list(conv.turns.send(huge))
        text = refused.value.user_text()
        assert text.startswith("This message is at least ") and "2,048 tokens" in text
        assert "\n" not in text
        assert conv.messages == [] and conv.store.get_session(conv.session.id).messages == []
    finally:
        conv.shutdown()
