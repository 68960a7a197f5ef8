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

from .conftest import load, make_image
from .mistral3_models import mlx_vlm_inputs, write_mistral3
from .turns import prompt_ids, three_ways


def their_text(loaded, n_images: int, text: str = "What is it?") -> str:
    parts = [{"type": "image"}] * n_images + [{"type": "text", "text": text}]
    return loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": parts}], tokenize=False, add_generation_prompt=True)


@pytest.mark.parametrize("size", [(100, 70), (60, 90), (9, 9), (64, 8), (300, 200)])
def test_the_span_is_mlx_vlms_for_every_size(mistral3_folder, tmp_path, size):
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


def test_logits_are_mlx_vlms_whole_and_in_chunks(mistral3_folder, images):
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


def test_the_processor_settings_are_in_the_key(mistral3_folder, images, tmp_path):
    near = load(mistral3_folder).model.know(images[:1])[0]
    far_folder = write_mistral3(tmp_path / "larger", image_size=96)
    far = load(far_folder).model.know(images[:1])[0]
    assert far.key != near.key and far.tokens > near.tokens


def test_warm_resumed_and_cold_agree_and_reuse_the_image(mistral3_folder, images, tmp_path):
    runs = three_ways(mistral3_folder, images, tmp_path)
    assert runs["warm"].calls == runs["resumed"].calls == [1, 0, 0, 0, 1, 0]
    assert runs["cold"].calls == [1, 1, 1, 1, 2, 2]
    ledger, warm_stats = runs["warm"].ledger, runs["warm"].stats
    first, second = (load(mistral3_folder).model.know([im])[0] for im in images)
    assert ledger.count(first.key) == first.tokens and ledger.count(second.key) == second.tokens
    assert ledger.index(second.key) > warm_stats[3].context_used
