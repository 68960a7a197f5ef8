"""Gemma 3 through the engine: the prompt mlx-vlm's processor makes, the
logits mlx-vlm's generation computes, images reused warm and after a
restore, sliding-window layers that forget an image without cost, and an
image's features kept on disk for a prompt that must compute its span again."""

from __future__ import annotations

import shutil

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from mlxchat import paths
from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.disk import window_rows
from mlxchat.engine.disk.segments import SegmentRef
from mlxchat.engine.kv import layers as kv_layers
from mlxchat.engine.prompt.fit import FittedPrompt

from .conftest import load
from .gemma3_models import WINDOW, mlx_vlm_prompt
from .turns import prompt_ids, run, three_ways


def test_prompt_and_logits_are_mlx_vlms(gemma3_folder, images):
    """The prompt is the one mlx-vlm's processor makes (the span's length
    with it), and the logits are those of mlx-vlm's generation path (its
    embeddings and its language model on its own cache layers): whole, and
    on mlx-lm's sliding-window layers fed in chunks that cut the image."""
    loaded = load(gemma3_folder)
    model = loaded.model
    ids = prompt_ids(loaded, images[:1])
    img = model.know(images[:1])[0]
    vlm = model.vlm
    image_id = vlm.config.image_token_index
    plain = [image_id if t < 0 else t for t in ids]
    text = loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
        tokenize=False, add_generation_prompt=True)
    theirs_ids = mlx_vlm_prompt(gemma3_folder, text, images[:1])
    assert plain == theirs_ids
    assert ids.count(img.key) == img.tokens == theirs_ids.count(image_id) == 16
    cache = make_prompt_cache(model)
    assert [type(c).__name__ for c in cache] == ["RotatingKVCache"] * 5 + ["KVCache"]
    x = mx.array(plain)[None]
    emb = vlm.get_input_embeddings(x, mx.array(model.processor.pixels(img)),
                                   mask=mx.ones(x.shape, dtype=mx.int32))
    theirs = vlm.language_model(x, inputs_embeds=emb.inputs_embeds,
                                cache=vlm.language_model.make_cache()).logits
    whole = model(mx.array(ids)[None], cache=cache)
    assert mx.array_equal(whole, theirs)
    cache = make_prompt_cache(model)
    chunked = mx.concatenate([model(mx.array(ids[a:a + 7])[None], cache=cache)
                              for a in range(0, len(ids), 7)], axis=1)
    # Chunks compute attention in other shapes: the last bits of float32 differ.
    diff = mx.abs(chunked - theirs).max().item()
    assert diff < 1e-4 * mx.abs(theirs).max().item(), diff


def test_warm_resumed_and_cold_agree_and_reuse_the_image(gemma3_folder, images,
                                                         tmp_path, monkeypatch):
    def fresh_home(mode: str) -> None:  # each mode its own features on disk
        monkeypatch.setenv("MLXCHAT_HOME", str(tmp_path / mode))

    runs = three_ways(gemma3_folder, images, tmp_path, before=fresh_home)
    warm = runs["warm"]
    warm_stats, sizes, ledger = warm.stats, warm.sizes, warm.ledger
    # The tower runs once per image: a resumed turn restores the image's KV,
    # a cold one (nothing restored) takes its features from disk.
    assert warm.calls == runs["resumed"].calls == runs["cold"].calls == [1, 0, 0, 0, 1, 0]
    first, second = sorted({t for t in ledger if t < 0}, key=ledger.index)
    assert ledger.count(first) == ledger.count(second) == 16
    assert warm_stats[0].prefilled_tokens == sizes[0] > 16 + 6
    assert ledger.index(second) > warm_stats[3].context_used


def _turns(engine, loaded, texts, images_at, tmp_path, tag):
    """Run ``texts`` on one engine (images_at: turn -> image), saving a
    segment per turn; returns messages, ledger, segment refs, stats."""
    messages, ledger, refs, previous, stats = [], [], [], None, []
    for i, text in enumerate(texts):
        shown = images_at.get(i, ())
        added = engine.prompts.message_ids(text, system=None, previous=previous, images=shown)
        messages.append(Message("user", text, images=shown))
        done = run(engine, FittedPrompt(ledger + added, list(messages), 0, ledger=True))
        stats.append((done.stats, len(added)))
        ledger += added + done.token_ids
        previous = done.token_ids
        messages.append(Message("assistant", done.reply, token_ids=done.token_ids))
        start = refs[-1].end if refs else 0
        path = tmp_path / f"{tag}{i}.safetensors"
        info = engine.save_segment(path, start)
        refs.append(SegmentRef(path, start, info.end, info.checksum,
                               engine.cached_tokens[start:info.end]))
    return messages, ledger, refs, stats


def test_an_image_that_left_the_window_costs_nothing_to_resume(gemma3_folder, images, tmp_path):
    loaded = load(gemma3_folder)
    engine = ChatEngine(loaded)
    texts = ["What is in this picture?", "Tell me about its colours in a few words please.",
             "And its shapes, in as many words as you like to use here?"]
    messages, ledger, refs, _ = _turns(engine, loaded, texts, {0: images[:1]}, tmp_path, "w")
    engine.close()
    key = next(t for t in ledger if t < 0)
    span_end = len(ledger) - ledger[::-1].index(key)
    assert len(ledger) - WINDOW > span_end  # the image slid out of the local window

    loaded = load(gemma3_folder)
    engine = ChatEngine(loaded)
    assert engine.load_segments(refs, conversation=messages).ok
    for c in engine.live_view().cache():
        meta = kv_layers.row(c).meta(c)
        if type(c).__name__ == "RotatingKVCache":
            held = window_rows.slots(meta, int(c.keys.shape[-2]))
            assert sorted(held[held >= 0]) == list(range(len(ledger) - WINDOW, len(ledger)))
        else:
            assert c.offset == len(ledger)
    calls = loaded.model.vision_calls
    added = engine.prompts.message_ids("Anything else?", system=None,
                                       previous=messages[-1].token_ids)
    messages.append(Message("user", "Anything else?"))
    done = run(engine, FittedPrompt(ledger + added, list(messages), 0, ledger=True))
    engine.close()
    assert (done.stats.reused_tokens, done.stats.prefilled_tokens) == (len(ledger), len(added))
    assert loaded.model.vision_calls == calls == 0
    assert done.reply


def test_an_edit_before_the_image_recomputes_its_span_without_the_tower(
        gemma3_folder, images, tmp_path):
    """A new process, the system prompt (before the image) edited: the
    image's span is prefilled again from the features kept on disk; with
    those removed, the tower runs."""
    from mlxchat.generation import GenerationSettings

    settings = GenerationSettings(temperature=0.0, max_tokens=8)
    loaded = load(gemma3_folder)
    engine = ChatEngine(loaded)
    first = [Message("system", "Be brief."),
             Message("user", "What is in this picture?", images=tuple(images[:1]))]
    done = run(engine, engine.prompts.fit(first, settings))
    engine.close()
    assert loaded.model.vision_calls == 1
    edited = [Message("system", "Be very brief."), first[1],
              Message("assistant", done.reply), Message("user", "And the colours?")]
    results = []
    for keep_features in (True, False):
        if not keep_features:
            shutil.rmtree(paths.kv_dir() / "features")
        loaded = load(gemma3_folder)
        engine = ChatEngine(loaded)
        prompt = engine.prompts.fit(edited, settings)
        got = run(engine, prompt)
        engine.close()
        key = next(t for t in prompt.tokens if t < 0)
        assert prompt.tokens.count(key) == 16
        assert got.stats.prefilled_tokens == got.stats.prompt_tokens == len(prompt.tokens)
        results.append((got.reply, loaded.model.vision_calls))
    assert results[0][0] == results[1][0]
    assert [calls for _, calls in results] == [0, 1]


def test_features_on_disk_stay_under_their_bound(tmp_path):
    from mlxchat.models.vision.features import FeatureStore

    one = mx.array(np.ones((16, 32), dtype=np.float32))
    store = FeatureStore("f", root=tmp_path, max_bytes=3 * 16 * 32 * 4 + 3 * 200)
    for key in range(-1, -6, -1):
        store.put(key, (one * key,))
    kept = sorted(int(p.stem[3:]) for p in (tmp_path / "f").glob("img*.safetensors"))
    assert len(kept) == 3 and kept == [3, 4, 5]
    assert len(store.get(-5)) == 1 and mx.array_equal(store.get(-5)[0], one * -5)
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in (tmp_path / "f").iterdir())
    (tmp_path / "f" / "img4.safetensors").write_bytes(b"damaged")
    assert store.get(-4) is None and not (tmp_path / "f" / "img4.safetensors").exists()


def test_features_on_disk_keep_every_output_of_the_tower(tmp_path):
    """A family whose tower gives more than the span's embeddings (Qwen3-VL's
    DeepStack levels) gets every array back, in order."""
    from mlxchat.models.vision.features import FeatureStore

    outputs = tuple(mx.array(np.full((16, 32), float(n), dtype=np.float32)) for n in range(4))
    store = FeatureStore("f", root=tmp_path)
    store.put(-7, outputs)
    got = store.get(-7)
    assert len(got) == 4 and all(mx.array_equal(a, b) for a, b in zip(got, outputs))


def test_the_template_and_processor_settings_are_the_published_ones():
    import hashlib

    from .gemma3_models import DATA

    for name, want in [("gemma-3-4b-it.chat_template.jinja",
                        "1117055ab8e8c90e1b200be00cddb78943616d9e"),
                       ("gemma-3-4b-it.preprocessor_config.json",
                        "b1e00fc184f61b698181821169c6374cd5813e5c")]:
        raw = (DATA / name).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest() == want
