"""A tiny random Mistral 3 (Mistral Small 3.1 layout) for tests and benchmarks.

``write_tiny_mistral3(folder, chat_template=...)`` writes a folder laid out
as ``mistralai/Mistral-Small-3.1-24B-Instruct-2503`` publishes it
(``config.json`` with ``text_config`` and ``vision_config``,
``preprocessor_config.json``, ``processor_config.json``), random weights
built from mlx-vlm's own config classes, and a byte-level tokenizer whose
first ids are Tekken's control tokens (``[IMG]`` 10, ``[IMG_BREAK]`` 12,
``[IMG_END]`` 13, as published). Images are resized to ``image_size`` pixels
at most; each ``patch x 2`` pixels square becomes one token.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlxchat.models.testing.text import _byte_chars
from mlxchat.models.testing.vision import save_random_vlm
from mlxchat.models.tokenizer import write_bpe_tokenizer

MISTRAL3_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                     "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]",
                     "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
                     "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]
"""Tekken's first control tokens, at their published ids."""
_PROCESSOR = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True,
              "do_resize": True, "image_mean": [0.48145466, 0.4578275, 0.40821073],
              "image_processor_type": "PixtralImageProcessor",
              "image_std": [0.26862954, 0.26130258, 0.27577711], "patch_size": 14,
              "processor_class": "PixtralProcessor", "resample": 3,
              "rescale_factor": 1 / 255, "size": {"longest_edge": 1540}}
"""Mistral Small 3's image processor settings (tests/vision/data/SOURCES.md)."""


def write_tiny_mistral3(folder: Path, *, chat_template: str, hidden_size: int = 32,
                        num_layers: int = 2, image_size: int = 64, patch_size: int = 4,
                        vision_layers: int = 1, processor_config: dict | None = None,
                        seed: int = 0) -> Path:
    """A random Mistral 3 with a 276-token vocabulary; ``processor_config``:
    the published ``preprocessor_config.json`` (its size and patch replaced
    by the tiny model's)."""
    from mlx_vlm.models import mistral3

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = MISTRAL3_SPECIALS + _byte_chars()
    ids = {t: i for i, t in enumerate(tokens)}
    text = {"model_type": "mistral", "hidden_size": hidden_size, "head_dim": 8,
            "num_hidden_layers": num_layers, "intermediate_size": 2 * hidden_size,
            "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
            "vocab_size": len(tokens), "rope_theta": 1e9, "max_position_embeddings": 8192,
            "sliding_window": None, "tie_word_embeddings": False}
    vision = {"model_type": "pixtral", "hidden_size": 16, "head_dim": 8,
              "intermediate_size": 32, "num_hidden_layers": vision_layers,
              "num_attention_heads": 2, "image_size": image_size, "patch_size": patch_size,
              "num_channels": 3, "rope_theta": 10000.0}
    config = {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
              "image_token_index": ids["[IMG]"], "spatial_merge_size": 2,
              "multimodal_projector_bias": False, "projector_hidden_act": "gelu",
              "vision_feature_layer": -1, "text_config": text, "vision_config": vision}
    save_random_vlm(folder, mistral3, config, text, vision, seed=seed, specials=len(MISTRAL3_SPECIALS))
    pre = dict(processor_config or _PROCESSOR)
    pre.update(size={"longest_edge": image_size}, patch_size=patch_size)
    (folder / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    (folder / "processor_config.json").write_text(json.dumps({
        "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]",
        "image_token": "[IMG]", "patch_size": patch_size, "processor_class": "PixtralProcessor",
        "spatial_merge_size": 2}, indent=2))
    write_bpe_tokenizer(folder, tokens=tokens, merges=[],
                        special_ids=list(range(len(MISTRAL3_SPECIALS))), bos_id=ids["<s>"],
                        eos_id=ids["</s>"], chat_template=chat_template, unk_id=ids["<unk>"],
                        pad_id=ids["<pad>"])
    return folder
