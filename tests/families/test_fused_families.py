"""Each tiny family decodes the same greedy tokens over 64 steps with the
native fused ops (rms_norm, rope, attention) as with MLX's own, and a
prefill chunk's attention is one op a layer: no score matrix, mask or
softmax is built (the work that made a 2k-token history's cold prefill grow
far faster than twice a 1k one's)."""

from __future__ import annotations

import io
import re
import sys
from collections import Counter

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from mlxchat import native
from mlxchat.models import load_folder
from mlxchat.native import fused

from .builders import FAMILIES, Family, write_family_model

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="built on Linux only (Metal serves macOS)")


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda f: f.name)
def family(request, tmp_path_factory):
    assert native.status().available, native.status().note  # `make test` builds it
    fam: Family = request.param
    loaded = load_folder(write_family_model(fam, tmp_path_factory.mktemp(fam.name)))
    assert fused.installed()  # loading a model on the CPU routed mx.fast to the kernels
    return fam, loaded


def _greedy(model, prompt: list[int], n: int) -> list[int]:
    return [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=n,
                                             prompt_cache=make_prompt_cache(model))]


def test_greedy_tokens_are_the_same_with_and_without_the_fused_ops(family):
    fam, loaded = family
    # Past the sliding window (24) of the families that have one, and in one chunk.
    prompt = loaded.tokenizer.encode("The keeper climbed the stairs at dusk and lit the lamp.")
    try:
        fused.uninstall()
        theirs = _greedy(loaded.model, prompt, 64)
        assert fused.install()
        ours = _greedy(loaded.model, prompt, 64)
    finally:
        fused.install()
    assert len(ours) == 64 and ours == theirs, fam.name


def _ops(*outputs: mx.array) -> Counter:
    out = io.StringIO()
    mx.export_to_dot(out, *outputs)
    return Counter(re.findall(r'label ="([^"]+)", shape=rectangle', out.getvalue()))


def test_a_prefill_chunk_builds_no_scores_mask_or_softmax(tmp_path):
    llama = next(f for f in FAMILIES if f.name == "llama3")
    model = load_folder(write_family_model(llama, tmp_path)).model
    assert fused.installed()
    cache = make_prompt_cache(model)
    logits = model(mx.array(list(range(5, 45)))[None], cache=cache)
    ops = _ops(logits)
    layers = len(model.layers)
    assert ops["MlxchatSDPA"] == layers and ops["MlxchatRoPE"] == 2 * layers
    assert ops["MlxchatRMSNorm"] == 2 * layers + 1
    assert not {"Softmax", "GreaterEqual", "Select", "Cos", "Sin", "Rsqrt"} & set(ops), ops
