"""Each model's own default sampling: read from its folder's
generation_config.json, or measured in the catalog (the bundled model); a
session that leaves a sampling setting unset samples with the model's."""

from __future__ import annotations

import json

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.models import catalog, load_folder
from mlxchat.models.sampling import FALLBACK, ModelSampling, from_folder
from mlxchat.models.testing.text import write_tiny_model

QUESTION = [Message("user", "Tell me a story about a lighthouse keeper and the sea.")]


def reply(engine: ChatEngine, settings: GenerationSettings) -> list[int]:
    done = [e for e in engine.turn(QUESTION, settings) if isinstance(e, TurnDone)][-1]
    return done.token_ids


def test_a_folder_s_generation_config_is_the_model_s_default(tmp_path):
    folder = write_tiny_model(tmp_path / "m")
    (folder / "generation_config.json").write_text(json.dumps(
        {"do_sample": False, "top_p": 0.8, "repetition_penalty": 99.0}))  # out of range
    loaded = load_folder(folder)
    sampling = loaded.info.sampling
    assert sampling.source == "the model's generation_config.json"
    assert (sampling.temperature, sampling.top_p, sampling.repetition_penalty) == (0.0, 0.8, None)
    assert sampling.values() == {**FALLBACK, "temperature": 0.0, "top_p": 0.8}
    engine = ChatEngine(loaded)
    try:
        unset = GenerationSettings(max_tokens=12, seed=3)  # sampling left to the model
        warm = GenerationSettings(max_tokens=12, seed=3, temperature=1.5)
        greedy = reply(engine, GenerationSettings(max_tokens=12, temperature=0.0))
        engine.drop_cache()
        assert reply(engine, unset) == greedy  # the model says greedy: greedy it is
        engine.drop_cache()
        assert reply(engine, warm) != greedy  # a session's own setting wins
    finally:
        engine.close()


def test_a_folder_without_one_has_none_and_a_broken_one_is_ignored(tmp_path):
    folder = write_tiny_model(tmp_path / "m")
    assert from_folder(folder) == ModelSampling()
    (folder / "generation_config.json").write_text("{not json")
    assert from_folder(folder) == ModelSampling()
    assert ModelSampling().values() == FALLBACK


def test_the_bundled_model_has_measured_defaults():
    entry = catalog.lookup("smollm2-135m")
    assert entry is not None and "temperature" in entry.sampling.named()
    assert entry.sampling.source.startswith("the catalog, measured")
    assert entry.sampling.temperature < FALLBACK["temperature"]


def test_unset_sampling_takes_the_model_s_values_and_set_ones_stay():
    model = {**FALLBACK, "temperature": 0.2, "top_p": 0.9}
    assert GenerationSettings().sampled_with(model).temperature == 0.2
    chosen = GenerationSettings(temperature=1.0).sampled_with(model)
    assert (chosen.temperature, chosen.top_p, chosen.min_p) == (1.0, 0.9, 0.0)
