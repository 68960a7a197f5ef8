"""SmolVLM through the engine: the prompt mlx-vlm's processor makes (tiles
and a global view, each tile its own span), the logits of mlx-vlm's own
forward, the split setting in each tile's key, and images reused warm and
after a restore with the tower run once per tile."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.chat import Message
from mlxchat.engine.prompt.render import render
from mlxchat.models.testing.smolvlm import write_tiny_smolvlm

from .conftest import load
from .smolvlm_models import TILE_TOKENS, mlx_vlm_inputs, smolvlm_template
from .turns import prompt_ids, three_ways


def test_prompt_and_logits_are_mlx_vlms(smolvlm_folder, images):
    loaded = load(smolvlm_folder)
    model = loaded.model
    ids = prompt_ids(loaded, images[:1])
    img = model.know(images[:1])[0]
    rows, cols = img.grid[1:]
    assert (rows, cols) == (2, 2)  # 100x70 at a longest edge of 64: 64x46, two tiles by two
    tiles = [t for t in dict.fromkeys(ids) if t < 0]
    assert tiles == [p.key for p in img.parts] and len(set(tiles)) == rows * cols + 1
    assert all(ids.count(t) == TILE_TOKENS for t in tiles)
    image_id = model.image_token_id
    plain = [image_id if t < 0 else t for t in ids]
    parts = [{"type": "image"}, {"type": "text", "text": "What is it?"}]
    text = loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": parts}], tokenize=False, add_generation_prompt=True)
    theirs = mlx_vlm_inputs(smolvlm_folder, text, images[:1])
    assert plain == theirs["ids"]
    assert img.tokens == theirs["ids"].count(image_id) == (rows * cols + 1) * TILE_TOKENS
    vlm = model.vlm
    x = mx.array(plain)[None]
    logits = vlm(x, mx.array(theirs["pixels"]), cache=make_prompt_cache(vlm.language_model))
    ours = model(mx.array(ids)[None], cache=make_prompt_cache(model))
    # mlx-vlm runs the tower on the tiles as one batch, we on each tile alone.
    diff = mx.abs(ours - logits.logits).max().item()
    assert diff < 1e-4 * mx.abs(logits.logits).max().item(), diff
    assert model.vision_calls == rows * cols + 1


def test_the_split_setting_is_in_each_tiles_key(smolvlm_folder, images, tmp_path):
    split = load(smolvlm_folder).model.know(images[:1])[0]
    whole_folder = write_tiny_smolvlm(tmp_path / "unsplit", chat_template=smolvlm_template(),
                                      split=False)
    whole = load(whole_folder).model.know(images[:1])[0]
    assert whole.grid[1:] == (0, 0) and len(whole.parts) == 1
    assert whole.tokens == TILE_TOKENS
    assert not {p.key for p in whole.parts} & {p.key for p in split.parts}


def test_warm_resumed_and_cold_agree_and_reuse_the_image(smolvlm_folder, images, tmp_path):
    runs = three_ways(smolvlm_folder, images, tmp_path)
    warm = runs["warm"]
    first, second = (load(smolvlm_folder).model.know([im])[0] for im in images)
    tiles = [len(first.parts), len(second.parts)]
    # The tower runs once per tile of a new image; a resumed turn restores the
    # image's KV; a cold one computes every image again (no features on disk).
    assert warm.calls == runs["resumed"].calls == [tiles[0], 0, 0, 0, tiles[1], 0]
    assert sum(runs["cold"].calls) > sum(warm.calls)
    for img in (first, second):
        assert all(warm.ledger.count(p.key) == TILE_TOKENS for p in img.parts)


def test_a_text_only_message_keeps_its_text_under_the_published_template(
        smolvlm_folder):
    """The template reads content as parts only: a message without an image
    is given as one text part, so its text is not dropped."""
    loaded = load(smolvlm_folder)
    tok = loaded.tokenizer
    ids = render(tok, [Message("user", "Hello there")])
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]
    assert ids == tok.apply_chat_template(parts, tokenize=True, add_generation_prompt=True)
    assert tok.decode(ids) == "<|im_start|>User: Hello there<end_of_utterance>\nAssistant:"
