"""SmolVLM images through the conversation: a reopened session asks more
without the tower, and a cold one computes the same replies."""

from __future__ import annotations

from pathlib import Path

from mlxchat.store.image_files import store_image

from .conftest import make_image
from .smolvlm_models import smolvlm_folder  # noqa: F401 (fixture)
from .test_vision_session import last, make


def test_a_reopened_smolvlm_session_asks_more_without_the_tower(
        smolvlm_folder, tmp_path):  # noqa: F811
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    conv, model = make(smolvlm_folder, tmp_path / "s.db")
    conv.turns.images.append(store_image(Path(shot.path), width=100, height=70))
    first = last(conv.turns.send("What is this?"))
    warm = last(conv.turns.send("Tell me more."))
    tiles = len(model.know([conv.session.messages[0].images[0]])[0].parts)
    assert tiles == 5 and model.vision_calls == tiles  # 2x2 tiles and the global view
    assert warm.stats.prefilled_tokens == len(conv.session.messages[-2].token_ids)
    sid = conv.session.id
    conv.close()

    again, fresh = make(smolvlm_folder, tmp_path / "s.db")
    again.open_session(sid)
    resumed = last(again.turns.send("And the corners?"))
    assert fresh.vision_calls == 0
    assert resumed.stats.cache_source == "snapshot"
    assert resumed.stats.reused_tokens == warm.stats.context_used
    again.close()

    cold, _ = make(smolvlm_folder, tmp_path / "c.db")
    cold.turns.images.append(store_image(Path(shot.path)))
    replies = [last(cold.turns.send(q)).reply
               for q in ("What is this?", "Tell me more.", "And the corners?")]
    assert replies == [first.reply, warm.reply, resumed.reply]
    cold.close()
