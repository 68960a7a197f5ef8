"""SmolVLM images through the conversation: a reopened session asks more
without the tower, and a cold one computes the same replies."""

from __future__ import annotations

from .sessions import reopened_session


def test_a_reopened_smolvlm_session_asks_more_without_the_tower(smolvlm_folder, tmp_path):
    turns = reopened_session(smolvlm_folder, tmp_path)
    tiles = len(turns.model.know([turns.stored[0]])[0].parts)
    assert tiles == 5 and turns.calls == [tiles, tiles]  # 2x2 tiles and the global view
