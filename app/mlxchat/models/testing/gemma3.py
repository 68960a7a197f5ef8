"""A tiny random Gemma 3 vision-language model for tests and benchmarks.

``write_tiny_gemma3_vl(folder, chat_template=...)`` writes a folder laid out
as Google publishes ``gemma-3-*-it`` (``config.json`` with ``text_config``
and ``vision_config``, ``preprocessor_config.json``,
``processor_config.json``), random weights built from mlx-vlm's own config
classes, and a byte-level tokenizer with Gemma's control tokens. Its layers
keep the real pattern (5 sliding-window layers, then a global one) with a
small window; each image is pooled into ``tokens_per_image`` soft tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from mlxchat.models.testing.text import _byte_chars
from mlxchat.models.tokenizer import write_bpe_tokenizer

GEMMA3_SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>",
                   "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
_PROCESSOR = {"do_normalize": True, "do_rescale": True, "do_resize": True,
              "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Gemma3ImageProcessor",
              "image_std": [0.5, 0.5, 0.5], "processor_class": "Gemma3Processor",
              "resample": 2, "rescale_factor": 1 / 255}
"""Gemma 3's image processor settings, as ``gemma-3-*-it`` publish them."""


def write_tiny_gemma3_vl(folder: Path, *, chat_template: str, hidden_size: int = 32,
                         num_layers: int = 6, window: int = 48, image_size: int = 32,
                         patch_size: int = 4, tokens_per_image: int = 16,
                         processor_config: dict | None = None, seed: int = 0) -> Path:
    """A random Gemma 3 with a 264-token vocabulary: layers 1-5 of each 6
    look ``window`` positions back, images of ``image_size`` pixels square
    become ``tokens_per_image`` tokens (a square number dividing the patches).
    ``processor_config``: the published ``preprocessor_config.json`` (its
    size and tokens per image replaced by the tiny model's)."""
    from mlx_vlm.models import gemma3

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = GEMMA3_SPECIALS + _byte_chars()
    ids = {t: i for i, t in enumerate(tokens)}
    text = {"model_type": "gemma3_text", "hidden_size": hidden_size,
            "num_hidden_layers": num_layers, "intermediate_size": 2 * hidden_size,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
            "query_pre_attn_scalar": 8, "rms_norm_eps": 1e-6, "vocab_size": len(tokens),
            "sliding_window": window, "sliding_window_pattern": 6,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "mm_tokens_per_image": tokens_per_image, "max_position_embeddings": 8192}
    vision = {"model_type": "siglip_vision_model", "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, "patch_size": patch_size,
              "image_size": image_size, "vision_use_head": False}
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "boi_token_index": ids["<start_of_image>"], "eoi_token_index": ids["<end_of_image>"],
              "image_token_index": ids["<image_soft_token>"],
              "mm_tokens_per_image": tokens_per_image, "bos_token_id": ids["<bos>"],
              "eos_token_id": [ids["<eos>"], ids["<end_of_turn>"]],
              "pad_token_id": ids["<pad>"], "vocab_size": len(tokens),
              "text_config": text, "vision_config": vision}
    cfg = gemma3.ModelConfig.from_dict(dict(config))
    cfg.text_config = gemma3.TextConfig.from_dict(text)
    cfg.vision_config = gemma3.VisionConfig.from_dict(vision)
    mx.random.seed(seed)
    model = gemma3.Model(cfg)
    # Gemma 3 ties its output to the embeddings (mlx-vlm drops any lm_head):
    # zero the bytes that are not visible ASCII, so replies re-tokenize to the
    # same ids and the template (which trims replies) keeps them; the control
    # tokens a prompt holds keep a tenth of theirs (they rarely win), the
    # others none.
    keep = [0.0 if t in ("<pad>", "<eos>", "<image_soft_token>") else 0.1
            for t in GEMMA3_SPECIALS] + [1.0 if 32 < b < 127 else 0.0 for b in range(256)]
    embed = model.language_model.model.embed_tokens
    embed.weight = embed.weight * mx.array(keep)[:, None]
    del model.language_model.lm_head  # not saved: the published weights have none
    mx.eval(model.parameters())
    mx.save_safetensors(str(folder / "model.safetensors"),
                        dict(tree_flatten(model.parameters())), {"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    pre = dict(processor_config or _PROCESSOR)
    pre.update(size={"height": image_size, "width": image_size},
               image_seq_length=tokens_per_image)
    (folder / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    (folder / "processor_config.json").write_text(json.dumps(
        {"image_seq_length": tokens_per_image, "processor_class": "Gemma3Processor"}, indent=2))
    write_bpe_tokenizer(folder, tokens=tokens, merges=[],
                        special_ids=list(range(len(GEMMA3_SPECIALS))), bos_id=ids["<bos>"],
                        eos_id=ids["<end_of_turn>"], chat_template=chat_template, unk_id=None,
                        pad_id=ids["<pad>"])
    return folder
