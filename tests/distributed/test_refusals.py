"""What a split model cannot do yet is refused in one line, and a model that
cannot be split is refused before any weight is read (no launch needed: a
one-rank group stands in for the ranks)."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest

from mlxchat.engine.distributed.channel import Channel
from mlxchat.engine.distributed.split import split_engine
from mlxchat.engine.events import EngineError
from mlxchat.generation import GenerationSettings
from mlxchat.models import ModelError, load_sharded
from mlxchat.models.sharding import ShardPlan
from mlxchat.models.testing.text import write_tiny_model


class TwoRanks:
    """The group a 2-rank launch would give rank 0 (only its size is read)."""

    def size(self) -> int:
        return 2

    def rank(self) -> int:
        return 0


def test_a_model_whose_heads_do_not_divide_is_refused_before_loading(tmp_path):
    folder = write_tiny_model(tmp_path / "odd", hidden_size=48, num_heads=3, num_kv_heads=3)
    (folder / "model.safetensors").write_bytes(b"not read")  # refused before the weights
    with pytest.raises(ModelError) as exc:
        load_sharded(str(folder), TwoRanks())
    assert str(exc.value) == ("odd cannot be split across 2 ranks: attention heads 3 % 2 = 1; "
                              "KV heads 3 % 2 = 1")


@pytest.fixture
def engine(tiny):
    group = mx.distributed.init()  # one rank: every collective is the identity
    eng = split_engine(tiny, Channel(group), ShardPlan("tensor", 2, "llama"))
    yield eng
    eng.close()


def test_what_cannot_run_across_ranks_is_refused_in_one_line(engine):
    settings = GenerationSettings()
    for refuse in (lambda: engine.prefill([1, 2, 3], settings),
                   lambda: engine.mark_prefix([1, 2, 3], Path("p.safetensors")),
                   lambda: engine.switch_model(engine.loaded),
                   lambda: engine.set_draft(engine.loaded, "tiny")):
        with pytest.raises(EngineError, match="not available with a model split across ranks"):
            refuse()
    assert "across ranks" in engine.speculation_problem("lookup")
    assert engine.speculation_problem("auto") is None
    engine.mark_prefix(None)  # forgetting a mark is fine
    from mlxchat.chat import human_bytes

    each = human_bytes(engine.info.weights_bytes)
    assert engine.state().layout == f"2 ranks · tensor · {each} each"


def test_a_split_engine_runs_turns_with_one_rank(engine):
    settings = GenerationSettings(temperature=0.0, max_tokens=6, speculative="auto")
    from mlxchat.chat import Message
    from mlxchat.engine.events import TurnDone

    done = [e for e in engine.turn([Message("user", "hi")], settings)
            if isinstance(e, TurnDone)][-1]
    assert done.stats.generated_tokens == len(done.token_ids) > 0
    assert done.stats.spec_mode == "off" and done.stats.engine_warning is None


def test_a_turn_given_up_on_keeps_the_figures_its_events_carried(engine):
    """The ranks' silence path (rank_timeout_s) ends the turn without the engine
    thread: its stats are what the turn's events said, not zeros."""
    from mlxchat.engine.distributed.split import TurnWatch
    from mlxchat.engine.events import PrefillProgress, TextDelta
    from mlxchat.engine.prompt.fit import FittedPrompt

    settings = GenerationSettings(temperature=0.0, max_tokens=6)
    watch = TurnWatch()
    watch.begin(prompt=FittedPrompt(list(range(40)), [], 0).tokens,
                window=engine.prompts.window(settings), kv_bits=None,
                weights_bytes=engine.info.weights_bytes)
    watch.saw(PrefillProgress(30, 30, 120.0, cached_tokens=39, kv_bytes=3900))
    watch.saw(TextDelta("Hel", 1, None, cached_tokens=40, kv_bytes=4000))
    watch.saw(TextDelta("lo", 2, 9.5, cached_tokens=41, kv_bytes=4100))
    done = watch.cut_short(RuntimeError("a rank did not answer for 30 s"), [7, 8])
    stats = done.stats
    assert done.reply == "Hello" and stats.finish_reason == "cancelled"
    assert (stats.prompt_tokens, stats.prefilled_tokens, stats.reused_tokens) == (40, 30, 10)
    assert stats.context_window == engine.prompts.window(settings) > 0
    assert (stats.context_used, stats.kv_bytes, stats.generated_tokens) == (41, 4100, 2)
    assert stats.weights_bytes == engine.info.weights_bytes > 0
    assert stats.prefill_tps == 120.0 and stats.decode_tps == 9.5 and stats.ttft_s > 0
    assert stats.engine_warning.endswith("the reply was cut short and kept as cancelled")
