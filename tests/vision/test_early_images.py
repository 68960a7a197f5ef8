"""An image encoded as soon as it is attached: the vision tower runs while the
question is typed, the turn that shows the image runs none and answers the
same tokens; dropped images are forgotten; a turn sent before the encoding
finished, or a model switched meanwhile, never runs the tower twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat.engine.turn.early_images import EarlyImages, Encoded
from mlxchat.generation import GenerationSettings
from mlxchat.store.image_files import store_image

from tests.waiting import BOUND_S

from .conftest import load, load_for_api, make_image
from .sessions import last, make

QUESTIONS = ("What is this?", "Tell me more.")


def plain_replies(folder, tmp_path: Path, shot) -> list[list[int]]:
    """The replies' tokens with the image put on the message directly (no early encoding)."""
    conv, _ = make(folder, tmp_path / "plain.db")
    conv.turns.images.append(store_image(Path(shot.path)))
    replies = [last(conv.turns.send(q)).token_ids for q in QUESTIONS]
    conv.close()
    return replies


@pytest.mark.parametrize("which", ["qwen_folder", "gemma3_folder", "smolvlm_folder"])
def test_the_turn_finds_the_image_encoded(which, request, tmp_path):
    folder = request.getfixturevalue(which)
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    conv, model = make(folder, tmp_path / "s.db")
    conv.turns.add_image(Path(shot.path))
    calls = conv.turns.encoding.result(BOUND_S).tower_calls  # while the user types
    assert calls >= 1 and model.vision_calls == calls  # SmolVLM: once per tile
    replies = [last(conv.turns.send(q)).token_ids for q in QUESTIONS]
    assert model.vision_calls == calls  # the turns ran no tower
    conv.close()
    assert replies == plain_replies(folder, tmp_path, shot)


def test_a_turn_sent_at_once_runs_the_tower_once(qwen_folder, tmp_path):
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    conv, model = make(qwen_folder, tmp_path / "s.db")
    conv.turns.add_image(Path(shot.path))
    encoding = conv.turns.encoding
    first = last(conv.turns.send(QUESTIONS[0]))  # queued behind the encoding: waits for it
    assert encoding.result(BOUND_S).tower_calls == 1 and model.vision_calls == 1
    second = last(conv.turns.send(QUESTIONS[1]))
    assert model.vision_calls == 1
    conv.close()
    assert [first.token_ids, second.token_ids] == plain_replies(qwen_folder, tmp_path, shot)


def test_dropped_images_are_forgotten(qwen_folder, tmp_path):
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    other = make_image(tmp_path / "other.png", (60, 60), 4)
    conv, model = make(qwen_folder, tmp_path / "s.db")
    conv.turns.add_image(Path(shot.path))
    conv.turns.add_image(Path(other.path))
    conv.turns.encoding.result(BOUND_S)
    assert model.vision_calls == 2
    conv.turns.images.clear()  # what /image --clear does
    assert conv.turns.encode_images().result(BOUND_S).tower_calls == 0
    conv.turns.images.append(store_image(Path(shot.path)))  # put back without encoding
    last(conv.turns.send(QUESTIONS[0]))
    assert model.vision_calls == 3  # its features had been dropped: the turn ran the tower
    conv.close()


class Queued:
    """Jobs kept until the test runs them: an engine thread that is busy."""

    def __init__(self) -> None:
        self.jobs: list = []

    def later(self, job):
        from concurrent.futures import Future

        fut: Future = Future()
        self.jobs.append((job, fut))
        return fut

    def run_all(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job, fut in jobs:
            fut.set_result(job())


def test_a_model_switched_or_a_newer_hold_skips_the_queued_job(qwen_folder, tmp_path):
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    other = make_image(tmp_path / "other.png", (60, 60), 4)
    first, second = load(qwen_folder), load(qwen_folder)
    held, queue = [first], Queued()
    images = EarlyImages(later=queue.later, loaded=lambda: held[0], match=lambda _dtype: None)
    settings = GenerationSettings()
    superseded = images.hold([shot], settings)
    newer = images.hold([shot, other], settings)
    switched = images.hold([other], settings)
    held[0] = second  # the model was switched before the engine ran them
    queue.run_all()
    assert superseded.result().tower_calls == newer.result().tower_calls == 0
    assert switched.result().tower_calls == 0
    assert first.model.vision_calls == second.model.vision_calls == 0
    again = images.hold([shot, other], settings)
    queue.run_all()
    assert again.result().tower_calls == 2 and second.model.vision_calls == 2


def test_a_text_model_holds_nothing(tiny, tmp_path):
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    images = EarlyImages(later=Queued().later, loaded=lambda: tiny, match=lambda _dtype: None)
    assert images.hold([shot], GenerationSettings()).result() == Encoded()


async def test_image_command_encodes_and_clear_forgets(tmp_path, qwen_folder):
    from tests.tui.app_support import ready, send, tiny_app

    shot = make_image(tmp_path / "shot.png", (100, 70), 5)
    loaded = load_for_api(qwen_folder)
    app = tiny_app(tmp_path / "s.db", loaded)
    async with app.run_test(size=(120, 50)) as pilot:
        await ready(pilot)
        await send(pilot, f"/image {shot.path}")
        turns = app.conversation.turns
        assert turns.encoding.result(BOUND_S).tower_calls == 1
        await send(pilot, "/image --clear")
        assert turns.images == [] and turns.encoding.result(BOUND_S).tower_calls == 0
        await send(pilot, f"/image {shot.path}")
        assert turns.encoding.result(BOUND_S).tower_calls == 1  # dropped, so computed again
        await send(pilot, "What is it?")
        assert [len(m.images) for m in app.conversation.messages] == [1, 0]
        assert loaded.model.vision_calls == 2  # the turn ran none


def test_a_model_switched_after_the_image_encodes_it_again(qwen_folder, tmp_path):
    from mlxchat.config import Settings
    from mlxchat.engine.core import ChatEngine
    from mlxchat.session.conversation import Conversation
    from mlxchat.store import open_store

    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    first, other = load(qwen_folder), load(qwen_folder)
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature, settings.generation.max_tokens = 0.0, 8
    conv = Conversation(settings=settings, store=open_store(tmp_path / "s.db"),
                        engine=ChatEngine(first), model_spec="tiny-vl",
                        load_model=lambda spec: other)
    conv.turns.add_image(Path(shot.path))
    conv.switch_model("other")  # while the first model's encoding may still be queued
    assert conv.turns.encoding.result(BOUND_S).tower_calls == 1
    assert other.model.vision_calls == 1  # encoded for the new model before the send
    replies = [last(conv.turns.send(q)).token_ids for q in QUESTIONS]
    assert other.model.vision_calls == 1 and first.model.vision_calls <= 1
    conv.close()
    assert replies == plain_replies(qwen_folder, tmp_path, shot)
