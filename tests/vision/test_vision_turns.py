"""Images in the token ledger: a span keyed by the image, reused like any
tokens warm and after a restore; the vision tower runs only for positions no
cache holds; mRoPE positions come back with the restored tokens."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.disk.segments import SegmentRef
from mlxchat.engine.events import TurnDone
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.generation import GenerationSettings

from .conftest import load, mlx_vlm_image_tokens

GREEDY = GenerationSettings(temperature=0.0, max_tokens=8)
TURNS = [("What is in this picture?", 0), ("And the colours?", None), ("Say more.", None),
         ("Anything else?", None), ("Compare it with this one.", 1), ("Which is brighter?", None)]
"""Six turns: an image first, three text follow-ups, a second image in turn 5."""


def run(engine: ChatEngine, prompt: FittedPrompt) -> TurnDone:
    done = [ev for ev in engine.turn(prompt, GREEDY) if isinstance(ev, TurnDone)]
    assert len(done) == 1
    return done[0]


def conversation(folder, images, tmp_path, mode: str):
    """The six turns on one engine (warm), on a fresh model and engine each turn
    restored from the KV segments written so far (resumed), or on a fresh one
    each turn with nothing restored (cold). Returns replies, stats and the
    vision tower's calls per turn."""
    loaded = load(folder)
    engine = ChatEngine(loaded)
    messages, ledger, refs, previous = [], [], [], None
    replies, stats, calls, sizes = [], [], [], []
    for i, (text, image) in enumerate(TURNS):
        shown = () if image is None else (images[image],)
        if mode != "warm":
            engine.close()
            loaded = load(folder)
            engine = ChatEngine(loaded)
            if mode == "resumed" and refs:
                assert engine.load_segments(refs, conversation=messages).ok
        added = engine.prompts.message_ids(text, system=None, previous=previous, images=shown)
        messages.append(Message("user", text, images=shown))
        sizes.append(len(added))
        before = loaded.model.vision_calls
        done = run(engine, FittedPrompt(ledger + added, list(messages), 0, ledger=True))
        calls.append(loaded.model.vision_calls - before)
        replies.append(done.reply)
        stats.append(done.stats)
        ledger += added + done.token_ids
        previous = done.token_ids
        messages.append(Message("assistant", done.reply, token_ids=done.token_ids))
        start = refs[-1].end if refs else 0
        info = engine.save_segment(tmp_path / f"{mode}{i}.safetensors", start)
        refs.append(SegmentRef(tmp_path / f"{mode}{i}.safetensors", start, info.end,
                               info.checksum, engine.cached_tokens[start:info.end]))
    engine.close()
    return replies, stats, calls, sizes, ledger


def test_adapter_computes_what_mlx_vlm_computes(vl_folder, images):
    """The whole prompt, and the same fed in chunks that cut the image span,
    give mlx-vlm's own logits (its forward with pixel values and grid), on
    mlx-lm's cache layers and on mlx-vlm's."""
    import mlx_vlm.models.cache as vlm_cache

    loaded = load(vl_folder)
    model = loaded.model
    engine = ChatEngine(loaded)
    ids = engine.prompts.message_ids("What is it?", system=None, previous=None,
                                     images=images[:1])
    engine.close()
    img = model.know(images[:1])[0]
    assert ids.count(img.key) == img.tokens == mlx_vlm_image_tokens(vl_folder, images[0].path)
    plain = [model.image_token_id if t < 0 else t for t in ids]
    theirs = model.vlm(mx.array(plain)[None], pixel_values=mx.array(model.processor.pixels(img)),
                       image_grid_thw=mx.array([img.grid])).logits
    whole = model(mx.array(ids)[None], cache=make_prompt_cache(model))
    cache = make_prompt_cache(model)
    chunked = mx.concatenate([model(mx.array(ids[a:a + 5])[None], cache=cache)
                              for a in range(0, len(ids), 5)], axis=1)
    on_vlm_layers = model(mx.array(ids)[None], cache=[vlm_cache.KVCache() for _ in model.layers])
    assert mx.array_equal(whole, theirs) and mx.array_equal(on_vlm_layers, theirs)
    # Chunks compute attention in other shapes: the last bits of float32 differ.
    assert mx.allclose(chunked, theirs, atol=1e-5, rtol=0).item()


def test_warm_resumed_and_cold_agree_and_reuse_the_image(vl_folder, images, tmp_path):
    warm, warm_stats, warm_calls, sizes, ledger = conversation(vl_folder, images, tmp_path,
                                                               "warm")
    resumed, res_stats, res_calls, *_ = conversation(vl_folder, images, tmp_path, "resumed")
    cold, cold_stats, cold_calls, *_ = conversation(vl_folder, images, tmp_path, "cold")
    assert warm == resumed == cold
    assert all(warm)
    # The vision tower runs once per image on one engine, never on a resumed
    # turn except for the new image; cold recomputes every image each turn.
    assert warm_calls == [1, 0, 0, 0, 1, 0]
    assert res_calls == [1, 0, 0, 0, 1, 0]
    assert cold_calls == [1, 1, 1, 1, 2, 2]
    for w, r, c in zip(warm_stats, res_stats, cold_stats):
        assert c.reused_tokens == 0 and c.prefilled_tokens == c.prompt_tokens
        assert (w.reused_tokens, w.prefilled_tokens) == (r.reused_tokens, r.prefilled_tokens)
        assert w.prompt_tokens == r.prompt_tokens == c.prompt_tokens
    for prev, w, added in zip(warm_stats, warm_stats[1:], sizes[1:]):
        # Each follow-up prefills only its new message (the second image's
        # span with it, in turn 5): the previous prompt and reply are reused.
        assert w.reused_tokens == prev.context_used
        assert w.prefilled_tokens == added
        assert w.miss_reason is None
    first, second = sorted({t for t in ledger if t < 0}, key=ledger.index)
    assert warm_stats[0].prefilled_tokens == sizes[0] > ledger.count(first) == (
        mlx_vlm_image_tokens(vl_folder, images[0].path))
    assert sizes[4] > ledger.count(second) == mlx_vlm_image_tokens(vl_folder, images[1].path)
    assert ledger.index(second) > warm_stats[3].context_used
