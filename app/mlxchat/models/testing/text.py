"""Tiny random llama models with a byte-level tokenizer, for tests and benchmarks.

``write_tiny_model(folder)`` writes a complete MLX model folder (config,
random weights, tokenizer with a ChatML template) that loads in milliseconds.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from mlxchat.models.tokenizer import CHATML_TEMPLATE, write_bpe_tokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@lru_cache(maxsize=1)
def _byte_chars() -> list[str]:
    """GPT-2's printable stand-in for each byte, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def _byte_order() -> list[int]:
    """The byte each non-special token stands for, in vocabulary order."""
    return list(range(256))


def write_tiny_model(
    folder: Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    context_window: int = 2048,
    seed: int = 0,
    quantize_bits: int | None = None,
    chat_template: str = CHATML_TEMPLATE,
    sliding_window: int | None = None,
) -> Path:
    """Write a random llama with a 259-token byte-level vocabulary to ``folder``."""
    from mlx_lm.models import llama

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = SPECIALS + _byte_chars()
    config = {
        "model_type": "llama",
        "hidden_size": hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "intermediate_size": intermediate_size,
        "vocab_size": len(tokens),
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": context_window,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if sliding_window:
        # Alternate sliding-window and full layers: the first get RotatingKVCache.
        config["sliding_window"] = sliding_window
        config["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                                 for i in range(num_layers)]
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    # Only printable ASCII can win, so replies are text that re-tokenizes to
    # the same ids (random bytes >127 would not round-trip through UTF-8).
    printable = mx.array([b in range(32, 127) or b == 10 for b in _byte_order()])
    mask = mx.concatenate([mx.zeros((len(SPECIALS),)), printable.astype(mx.float32)])
    model.lm_head.weight = model.lm_head.weight * 4.0 * mask[:, None]
    if quantize_bits:
        nn.quantize(model, group_size=32, bits=quantize_bits)
        config["quantization"] = {"group_size": 32, "bits": quantize_bits}
    mx.eval(model.parameters())
    mx.save_safetensors(str(folder / "model.safetensors"),
                        dict(tree_flatten(model.parameters())), {"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    write_bpe_tokenizer(folder, tokens=tokens, merges=[], special_ids=[0, 1, 2],
                        bos_id=1, eos_id=2, chat_template=chat_template, unk_id=0)
    return folder
