"""mlx-vlm's own multi-turn path on the same model folder and turns, for
bench/vision.py: ``stream_generate`` with a ``PromptCacheState`` (its cache
of the previous turn's tokens), the processor built as ``load_processor``
builds it (mlx-vlm's family processor, Qwen2VLProcessor, Qwen2_5_VLProcessor or
Qwen3VLProcessor, over the image processor it picks, transformers' Pillow one or
its own numpy Qwen3VLImageProcessor, and the folder's tokenizer; AutoProcessor
would want torchvision).
Its TTFT includes its processor's work on every image of the prompt, which
it runs each turn; ours starts once the prompt's ids are planned."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence


def _image_processor(folder: Path, family: str) -> Any:
    """The image processor mlx-vlm's ``load_processor`` builds for the family."""
    if family == "qwen3_vl":
        from mlx_vlm.models.qwen3_vl.processing_qwen3_vl import (
            Qwen3VLImageProcessor,
            _qwen_vl_image_kwargs,
        )

        return Qwen3VLImageProcessor(**_qwen_vl_image_kwargs(str(folder)))
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    settings = json.loads((folder / "preprocessor_config.json").read_text())
    settings.pop("image_processor_type", None)
    settings.pop("processor_class", None)
    return Qwen2VLImageProcessorPil(**settings)


def _processor(folder: Path, template: str, family: str) -> Any:
    from mlx_vlm.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
    from mlx_vlm.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
    from mlx_vlm.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from mlx_vlm.tokenizer_utils import load_tokenizer
    from mlx_vlm.utils import StoppingCriteria
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    kind = {"qwen2_vl": Qwen2VLProcessor, "qwen2_5_vl": Qwen2_5_VLProcessor,
            "qwen3_vl": Qwen3VLProcessor}[family]
    processor = kind(image_processor=_image_processor(folder, family), tokenizer=tokenizer,
                     chat_template=template)
    processor.detokenizer = load_tokenizer(folder, return_tokenizer=False)(tokenizer)
    processor.tokenizer.stopping_criteria = StoppingCriteria(
        [tokenizer.convert_tokens_to_ids("<|im_end|>")], tokenizer)
    return processor


def conversation_ttfts(folder: Path, template: str, images: Sequence[str],
                       turns: Sequence[tuple[str, int | None]], *, family: str = "qwen2_vl"
                       ) -> list[tuple[float, int]]:
    """(TTFT, prompt tokens) of each turn, one token each, greedy; the whole
    conversation run once first to warm MLX's kernels, then measured."""
    from mlx_vlm.generate import PromptCacheState, stream_generate
    from mlx_vlm.utils import load_model

    model = load_model(folder)
    processor = _processor(folder, template, family)
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
            messages.append({"role": "assistant", "content": reply})
    return out
