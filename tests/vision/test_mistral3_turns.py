"""Mistral 3 through the engine: the prompt mlx-vlm's processor makes (rows of
image tokens, ``[IMG_BREAK]`` after each row but the last, ``[IMG_END]``),
the span's length following the image's size, the logits of mlx-vlm's own
forward (whole and in chunks that cut the image), the processor's settings in
the key, and images reused warm and after a restore with the tower run once
an image."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.engine.core import ChatEngine

from .conftest import load, make_image
from .mistral3_models import mistral3_folder, mlx_vlm_inputs, write_mistral3  # noqa: F401
from .test_vision_turns import conversation


def prompt_ids(loaded, images, text="What is it?") -> list[int]:
    engine = ChatEngine(loaded)
    try:
        return engine.prompts.message_ids(text, system=None, previous=None, images=images)
    finally:
        engine.close()


def their_text(loaded, n_images: int, text: str = "What is it?") -> str:
    parts = [{"type": "image"}] * n_images + [{"type": "text", "text": text}]
    return loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": parts}], tokenize=False, add_generation_prompt=True)


@pytest.mark.parametrize("size", [(100, 70), (60, 90), (9, 9), (64, 8), (300, 200)])
def test_the_span_is_mlx_vlms_for_every_size(mistral3_folder, tmp_path, size):  # noqa: F811
    loaded = load(mistral3_folder)
    model = loaded.model
    ref = make_image(tmp_path / "x.png", size, 5)
    ids = prompt_ids(loaded, [ref])
    img = model.know([ref])[0]
    theirs = mlx_vlm_inputs(mistral3_folder, their_text(loaded, 1), [ref])
    plain = [model.image_token_id if t < 0 else t for t in ids]
    assert plain == theirs["ids"]
    rows, cols = img.merged
    assert ids.count(img.key) == img.tokens == rows * cols == theirs["ids"].count(
        model.image_token_id)
    tok = loaded.tokenizer
    breaks, end = (tok.encode(t, add_special_tokens=False)[0] for t in ("[IMG_BREAK]",
                                                                       "[IMG_END]"))
    start = ids.index(img.key)
    span = ids[start:start + rows * (cols + 1)]
    assert span == ([img.key] * cols + [breaks]) * (rows - 1) + [img.key] * cols + [end]
    assert [tuple(int(x) for x in s) for s in theirs["sizes"]] == [
        (rows * 8, cols * 8)]  # patch 4, merged 2 x 2


def test_logits_are_mlx_vlms_whole_and_in_chunks(mistral3_folder, images):  # noqa: F811
    loaded = load(mistral3_folder)
    model = loaded.model
    ids = prompt_ids(loaded, images)
    theirs = mlx_vlm_inputs(mistral3_folder, their_text(loaded, 2), images)
    plain = [model.image_token_id if t < 0 else t for t in ids]
    assert plain == theirs["ids"]
    vlm = model.vlm
    expected = vlm(mx.array(plain)[None], mx.array(theirs["pixels"]), mask=None,
                   cache=make_prompt_cache(vlm.language_model),
                   image_sizes=theirs["sizes"]).logits
    whole = model(mx.array(ids)[None], cache=make_prompt_cache(model))
    assert model.vision_calls == 2
    cache = make_prompt_cache(model)
    first = ids.index(model.know(images[:1])[0].key)
    cuts = [0, first + 5, first + 13, first + 30] + list(range(first + 60, len(ids), 37))
    chunked = mx.concatenate([model(mx.array(ids[a:b])[None], cache=cache)
                              for a, b in zip(cuts, cuts[1:] + [len(ids)])], axis=1)
    scale = mx.abs(expected).max().item()
    # mlx-vlm runs the tower on both images as one batch, we on each alone;
    # chunks compute attention in other shapes: the last bits of float32 differ.
    assert mx.abs(whole - expected).max().item() < 1e-4 * scale
    assert mx.abs(chunked - expected).max().item() < 1e-4 * scale
    assert model.vision_calls == 2  # the chunks reused the kept features


def test_the_processor_settings_are_in_the_key(mistral3_folder, images, tmp_path):  # noqa: F811
    near = load(mistral3_folder).model.know(images[:1])[0]
    far_folder = write_mistral3(tmp_path / "larger", image_size=96)
    far = load(far_folder).model.know(images[:1])[0]
    assert far.key != near.key and far.tokens > near.tokens


def test_warm_resumed_and_cold_agree_and_reuse_the_image(mistral3_folder, images,  # noqa: F811
                                                         tmp_path):
    runs = {mode: conversation(mistral3_folder, images, tmp_path, mode)
            for mode in ("warm", "resumed", "cold")}
    warm, warm_stats, warm_calls, sizes, ledger = runs["warm"]
    resumed, res_stats, res_calls, *_ = runs["resumed"]
    cold, cold_stats, cold_calls, *_ = runs["cold"]
    assert warm == resumed == cold and all(warm)
    assert warm_calls == res_calls == [1, 0, 0, 0, 1, 0]
    assert cold_calls == [1, 1, 1, 1, 2, 2]
    for prev, w, added in zip(warm_stats, warm_stats[1:], sizes[1:]):
        assert w.reused_tokens == prev.context_used
        assert w.prefilled_tokens == added
        assert w.miss_reason is None
    for w, r, c in zip(warm_stats, res_stats, cold_stats):
        assert (w.reused_tokens, w.prefilled_tokens) == (r.reused_tokens, r.prefilled_tokens)
        assert c.reused_tokens == 0 and c.prefilled_tokens == c.prompt_tokens
        assert w.prompt_tokens == r.prompt_tokens == c.prompt_tokens
    first, second = (load(mistral3_folder).model.know([im])[0] for im in images)
    assert ledger.count(first.key) == first.tokens and ledger.count(second.key) == second.tokens
    assert ledger.index(second.key) > warm_stats[3].context_used
