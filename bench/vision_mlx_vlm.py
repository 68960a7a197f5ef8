"""mlx-vlm's own multi-turn path on the same model folder and turns, for
bench/vision.py: ``stream_generate`` with a ``PromptCacheState`` (its cache
of the previous turn's tokens), the processor built as ``load_processor``
builds it (mlx-vlm's processor of the family over the image processor it
picks, transformers' Pillow one or mlx-vlm's own numpy one for Qwen3-VL, and
the folder's tokenizer: bench/vision_families.py; AutoProcessor would want
torchvision).
Its TTFT includes its processor's work on every image of the prompt, which
it runs each turn; ours starts once the prompt's ids are planned."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence


def _processor(family: Any, folder: Path, template: str) -> Any:
    from mlx_vlm.tokenizer_utils import load_tokenizer
    from mlx_vlm.utils import StoppingCriteria

    processor = family.processor(folder, template)
    tokenizer = processor.tokenizer
    processor.detokenizer = load_tokenizer(folder, return_tokenizer=False)(tokenizer)
    eos = json.loads((folder / "config.json").read_text()).get("eos_token_id")
    stops = eos if isinstance(eos, list) else [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    processor.tokenizer.stopping_criteria = StoppingCriteria(stops, tokenizer)
    return processor


def conversation_ttfts(family: Any, folder: Path, template: str, images: Sequence[str],
                       turns: Sequence[tuple[str, int | None]]) -> list[tuple[float, int]]:
    """(TTFT, prompt tokens) of each turn, one token each, greedy; the whole
    conversation run once first to warm MLX's kernels, then measured."""
    from mlx_vlm.generate import PromptCacheState, stream_generate
    from mlx_vlm.utils import load_model

    model = load_model(folder)
    processor = _processor(family, folder, template)
    tokenizer = processor.tokenizer
    out: list[tuple[float, int]] = []
    for _ in range(2):
        state, messages, shown, out = PromptCacheState(), [], [], []
        for text, image in turns:
            if image is not None:
                shown.append(images[image])
            content = ([{"type": "image"}] if image is not None else []) + [
                {"type": "text", "text": text}]
            messages.append({"role": "user", "content": content})
            prompt = tokenizer.apply_chat_template(messages, chat_template=template,
                                                   add_generation_prompt=True, tokenize=False)
            start, first, reply, last = time.perf_counter(), None, "", None
            for last in stream_generate(model, processor, prompt, image=list(shown) or None,
                                        max_tokens=1, temperature=0.0,
                                        prompt_cache_state=state):
                first = first if first is not None else time.perf_counter() - start
                reply += last.text
            assert first is not None and last is not None
            out.append((first, int(last.prompt_tokens)))
            # As parts: SmolVLM's template reads content only so (the app does the same).
            messages.append({"role": "assistant", "content": [{"type": "text", "text": reply}]})
    return out
