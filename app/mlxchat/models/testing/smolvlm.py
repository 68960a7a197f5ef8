"""A tiny random SmolVLM (Idefics3 layout) for tests and benchmarks.

``write_tiny_smolvlm(folder, chat_template=...)`` writes a folder laid out as
``HuggingFaceTB/SmolVLM*-Instruct`` publish it (``config.json`` with
``text_config`` and ``vision_config``, ``preprocessor_config.json``), random
weights built from mlx-vlm's own config classes, and a byte-level tokenizer
with SmolVLM's control tokens (the image markers and every ``<row_R_col_C>``).
Tiles are ``tile`` pixels square, ``(tile / patch)^2 / 4`` tokens each after
the pixel shuffle; an image is resized to ``longest_edge`` and split.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlxchat.models.testing.text import _byte_chars
from mlxchat.models.testing.vision import save_random_vlm
from mlxchat.models.tokenizer import write_bpe_tokenizer

SMOLVLM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<end_of_utterance>",
                    "<fake_token_around_image>", "<image>", "<global-img>"]
_PROCESSOR = {"do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True,
              "do_pad": True, "do_rescale": True, "do_resize": True,
              "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
              "image_processor_type": "SmolVLMImageProcessor",
              "processor_class": "SmolVLMProcessor", "resample": 1,
              "rescale_factor": 1 / 255}
"""SmolVLM's image processor settings (transformers' defaults for the family);
the sizes are the tiny model's."""


def write_tiny_smolvlm(folder: Path, *, chat_template: str, hidden_size: int = 32,
                       num_layers: int = 2, tile: int = 32, patch_size: int = 4,
                       longest_edge: int = 64, split: bool = True, seed: int = 0) -> Path:
    """A random SmolVLM whose images split into at most
    ``(longest_edge / tile)^2`` tiles and a global view."""
    from mlx_vlm.models import smolvlm

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    most = -(-longest_edge // tile)
    rows = [f"<row_{r}_col_{c}>" for r in range(1, most + 1) for c in range(1, most + 1)]
    specials = SMOLVLM_SPECIALS + rows
    tokens = specials + _byte_chars()
    ids = {t: i for i, t in enumerate(tokens)}
    text = {"model_type": "llama", "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
            "vocab_size": len(tokens), "num_hidden_layers": num_layers,
            "rope_theta": 100000.0, "max_position_embeddings": 8192}
    vision = {"model_type": "smolvlm_vision", "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, "patch_size": patch_size,
              "image_size": tile}
    config = {"architectures": ["SmolVLMForConditionalGeneration"], "model_type": "smolvlm",
              "image_token_id": ids["<image>"], "scale_factor": 2,
              "eos_token_id": ids["<end_of_utterance>"], "pad_token_id": ids["<|endoftext|>"],
              "vocab_size": len(tokens), "text_config": text, "vision_config": vision}
    save_random_vlm(folder, smolvlm, config, text, vision, seed=seed, specials=len(specials))
    pre = dict(_PROCESSOR, do_image_splitting=split, size={"longest_edge": longest_edge},
               max_image_size={"longest_edge": tile})
    (folder / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    write_bpe_tokenizer(folder, tokens=tokens, merges=[],
                        special_ids=list(range(len(specials))), bos_id=None,
                        eos_id=ids["<end_of_utterance>"], chat_template=chat_template,
                        unk_id=None, pad_id=ids["<|endoftext|>"])
    return folder
