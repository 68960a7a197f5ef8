"""What a loaded model is: the arrays, the tokenizer, and measured facts about them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from mlxchat.models import precision
from mlxchat.models.sampling import ModelSampling


@dataclass(frozen=True)
class ModelInfo:
    name: str
    """Display name (catalog alias or folder name)."""
    spec: str
    """What the user asked for; resolves back to the same model."""
    path: str
    """The MLX model folder the weights were read from."""
    architecture: str
    parameter_count: int
    bits_per_weight: float
    """Bytes of all parameters * 8 / parameter count (scales and biases included)."""
    weights_bytes: int
    """Bytes the parameters take in memory, summed from the arrays."""
    context_window: int
    chat_template_hash: str
    fingerprint: str
    """Identifies these exact weights in this precision; KV snapshots are keyed by it."""
    quantization: str
    """e.g. 'int4 (g32)', 'int8 (g64)', 'bfloat16'."""
    scales_dtype: str
    """dtype of quantization scales/biases in memory (float32 on the CPU path)."""
    device: str
    """'cpu' or 'gpu'."""
    model_fingerprint: str = ""
    """``fingerprint`` at the policy's compute dtype, kept when a session casts
    the model to another: the token ledger's model key (the session's own dtype
    goes into the key apart)."""
    compute_dtype: str = "float32"
    """What activations and the KV cache compute in (models/precision.py)."""
    default_compute_dtype: str = "float32"
    """What the policy picks for this model on this device (a session may override it)."""
    num_layers: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    active_parameter_count: int = 0
    """Parameters one token runs through: for a mixture of experts the routed
    experts count k/E, shared experts in full; else all of them."""
    reasoning: str = "none"
    """How replies mark reasoning: 'think' (think tags), 'harmony' (gpt-oss
    channels) or 'none'."""
    sampling: ModelSampling = ModelSampling()
    """The model's own default sampling (its generation_config, or the catalog's)."""
    template_variables: tuple[str, ...] = ()
    """Of enable_thinking and reasoning_effort, those the chat template reads."""
    system_role: bool = True
    """The chat template takes a system message; else it is folded into the first one."""
    memory_note: str | None = None
    """Set when the context window was lowered to fit this machine's memory."""
    needed_bytes: int = 0
    """Weights plus the KV cache at ``context_window``, as estimated before loading."""
    sees_images: bool = False
    """A vision-language model: messages may show it images."""


@dataclass
class LoadedModel:
    model: nn.Module
    tokenizer: Any
    """An mlx-lm ``TokenizerWrapper``."""
    info: ModelInfo


def on_cpu() -> bool:
    return mx.default_device().type == mx.cpu


def weights_bytes(model: nn.Module) -> int:
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def _mode_label(mode: str, bits: int) -> str:
    """'int4' for MLX's affine mode, else the format's own name ('MXFP4', 'NVFP4')."""
    return f"int{bits}" if mode == "affine" else mode.upper()


def quantization_label(model: nn.Module) -> tuple[str, str]:
    """('int4 (g32)', 'float32') from the model's quantized layers (their mode
    read from the modules: affine ints, MXFP4, ...), the most common first,
    others after it; or the model's dtype."""
    bits: dict[tuple[str, int], int] = {}
    scales = None
    for _, module in model.named_modules():
        if hasattr(module, "bits") and hasattr(module, "scales"):
            mode = _mode_label(getattr(module, "mode", "affine") or "affine", module.bits)
            key = (mode, module.group_size)
            bits[key] = bits.get(key, 0) + module.weight.size
            scales = scales or str(module.scales.dtype).replace("mlx.core.", "")
    if not bits:
        dtypes = {str(v.dtype) for _, v in tree_flatten(model.parameters())}
        label = sorted(dtypes)[0].replace("mlx.core.", "") if dtypes else "unknown"
        return label, "-"
    ranked = sorted(bits.items(), key=lambda kv: -kv[1])
    label = " + ".join(f"{mode} (g{group})" for (mode, group), _ in ranked)
    return label, scales or "-"


def _own_params(module: nn.Module) -> int:
    """Parameters a module holds itself (not its children's); a quantized one
    counts its unpacked weights, not the scales. Non-leaf modules hold some too
    (attention sinks, recurrent decay rates), so every module is visited. Names
    starting with '_' are buffers, not parameters (YaRN's and Llama 3's rope
    frequencies)."""
    own = [v for k, v in module.items() if isinstance(v, mx.array) and not k.startswith("_")]
    if own and hasattr(module, "bits") and hasattr(module, "scales"):
        bias = module.get("bias")
        return (bias.size if bias is not None else 0) + module.weight.size * 32 // module.bits
    return sum(v.size for v in own)


def parameter_counts(model: nn.Module, config: dict) -> tuple[int, int]:
    """(total, active per token). A mixture of experts' routed expert weights
    (mlx-lm's switch layers: one slice per expert) count k/E toward the active
    figure; everything else, shared experts included, counts in full."""
    cfg = config.get("text_config", config)
    k = int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 0)
    total = active = 0
    for _, module in model.named_modules():
        n = _own_params(module)
        total += n
        experts = getattr(module, "num_experts", None) if "Switch" in type(module).__name__ \
            else None
        active += n * k // experts if experts and k else n
    return total, active


def template_hash(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None) or ""
    if not isinstance(template, str):
        template = json.dumps(template, sort_keys=True, default=str)
    return hashlib.sha256(template.encode("utf-8")).hexdigest()[:16]


TEMPLATE_VARIABLES = ("enable_thinking", "reasoning_effort")

@lru_cache(maxsize=16)
def takes_system(tokenizer: Any) -> bool:
    """False when the chat template refuses a system message (Gemma 2 raises
    'System role not supported'); then it is folded into the first user message."""
    probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    try:
        tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - templates raise what they like
        return "system" not in str(exc).lower()
    return True


def template_variables(tokenizer: Any) -> tuple[str, ...]:
    template = getattr(tokenizer, "chat_template", None) or ""
    if not isinstance(template, str):
        template = json.dumps(template, default=str)
    return tuple(v for v in TEMPLATE_VARIABLES if v in template)


def folder_fingerprint(folder: Path, precision: str) -> str:
    """A cheap identity of the weights in ``folder``: config, the safetensors
    headers (names, dtypes, shapes, offsets) and sampled bytes of each file.

    Hashing gigabytes on every start is too slow; a header plus 16 spread
    samples changes whenever the weights do in practice.
    """
    h = hashlib.sha256(precision.encode())
    config = folder / "config.json"
    if config.exists():
        h.update(config.read_bytes())
    for f in sorted(folder.glob("*.safetensors")):
        size = f.stat().st_size
        h.update(f.name.encode() + str(size).encode())
        with f.open("rb") as fh:
            head_len = int.from_bytes(fh.read(8), "little")
            h.update(fh.read(min(head_len, 64 << 20)))
            for i in range(16):
                fh.seek(size * i // 16)
                h.update(fh.read(4096))
    return h.hexdigest()[:24]


def _fingerprint(path: Path, device: str, scales: str, quant: str, compute: str) -> str:
    # The dominant format only, as before mixed formats were named: snapshots stay valid.
    precision_key = f"{device}:{scales}:{quant.split(' + ')[0]}"
    if scales not in ("-", compute):  # MXFP4's uint8 scales do not say it
        precision_key += f":computes {compute}"
    return folder_fingerprint(path, precision_key)


def recast(loaded: LoadedModel, dtype: str) -> LoadedModel:
    """``loaded`` computing in ``dtype`` (its parameters cast in place, from the
    folder's stored values): the same model, a new fingerprint."""
    precision.apply(loaded.model, dtype, folder=Path(loaded.info.path))
    return retyped(loaded)


def retyped(loaded: LoadedModel) -> LoadedModel:
    """``loaded`` described as computing in the dtype its arrays hold now
    (another engine over the same weights may have cast them)."""
    info = loaded.info
    quant, scales = quantization_label(loaded.model)
    compute = precision.current_dtype(loaded.model)
    nbytes = weights_bytes(loaded.model)
    return LoadedModel(loaded.model, loaded.tokenizer, replace(
        info, compute_dtype=compute, scales_dtype=scales, weights_bytes=nbytes,
        bits_per_weight=nbytes * 8 / max(info.parameter_count, 1),
        fingerprint=_fingerprint(Path(info.path), info.device, scales, quant, compute)))


def describe(model: nn.Module, tokenizer: Any, config: dict, *, name: str, spec: str,
             path: Path, default_compute_dtype: str | None = None) -> ModelInfo:
    """Build the ModelInfo of a model already loaded (and cast for this device)."""
    from mlxchat.models.markup import markup_of

    params, active = parameter_counts(model, config)
    nbytes = weights_bytes(model)
    quant, scales = quantization_label(model)
    device = "cpu" if on_cpu() else "gpu"
    compute = precision.current_dtype(model)
    text_cfg = config.get("text_config", config)
    heads = text_cfg.get("num_attention_heads", 0)
    hidden = text_cfg.get("hidden_size", 0)
    context = (config.get("max_position_embeddings")
               or text_cfg.get("max_position_embeddings") or 4096)
    return ModelInfo(
        name=name,
        spec=spec,
        path=str(path),
        architecture=config.get("model_type", "unknown"),
        parameter_count=params,
        bits_per_weight=nbytes * 8 / max(params, 1),
        weights_bytes=nbytes,
        context_window=int(context),
        chat_template_hash=template_hash(tokenizer),
        fingerprint=(fingerprint := _fingerprint(path, device, scales, quant, compute)),
        model_fingerprint=fingerprint,
        quantization=quant,
        scales_dtype=scales,
        device=device,
        compute_dtype=compute,
        default_compute_dtype=default_compute_dtype or compute,
        num_layers=len(getattr(model, "layers", [])),
        kv_heads=text_cfg.get("num_key_value_heads", heads) or 0,
        head_dim=text_cfg.get("head_dim") or (hidden // heads if heads else 0),
        active_parameter_count=active,
        reasoning=markup_of(tokenizer).kind,
        system_role=takes_system(tokenizer),
        template_variables=template_variables(tokenizer),
        sees_images=bool(getattr(model, "sees_images", False)),
    )
