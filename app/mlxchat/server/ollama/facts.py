"""The loaded model described as Ollama's ``/api/show`` does: what it can do
(``capabilities``), its sampling defaults (``parameters``, Ollama's text form)
and ``model_info`` under GGUF's key names, from the model's config.json."""

from __future__ import annotations

from typing import Any

from mlxchat.engine.prompt.fim import fim_tokens
from mlxchat.generation import GenerationSettings
from mlxchat.models import ModelInfo
from mlxchat.models.tools import call_markup

CONFIG_KEYS = {
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
    "expert_count": "num_local_experts",
    "expert_used_count": "num_experts_per_tok",
}
"""GGUF's key (after the architecture) -> the Hugging Face config's name."""


def capabilities(info: ModelInfo, tokenizer: Any) -> list[str]:
    """What the loaded model does here: "completion" always; "tools" when its
    calls can be read back; "vision", "thinking" and "insert" (fill in the
    middle) when it has them."""
    found = ["completion"]
    if call_markup(tokenizer) is not None:
        found.append("tools")
    if info.sees_images:
        found.append("vision")
    if thinks(info):
        found.append("thinking")
    if fim_tokens(tokenizer) is not None:
        found.append("insert")  # /api/generate's suffix
    return found


def thinks(info: ModelInfo) -> bool:
    """The model reasons (its replies mark thoughts, or its template can turn them on)."""
    return info.reasoning != "none" or "enable_thinking" in info.template_variables


def model_info(info: ModelInfo, config: dict[str, Any], *, window: int) -> dict[str, Any]:
    """``general.*`` and ``ARCH.*`` keys as Ollama names them; ``context_length``
    the window served (``serve --context`` may cap the model's)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    arch = info.architecture
    out: dict[str, Any] = {"general.architecture": arch,
                           "general.parameter_count": info.parameter_count,
                           f"{arch}.context_length": window}
    for key, name in CONFIG_KEYS.items():
        value = text.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{arch}.{key}"] = value
    return out


def parameters(info: ModelInfo, settings: GenerationSettings, tokenizer: Any, *,
               window: int) -> str:
    """The defaults a request that sets nothing gets, one ``name value`` a line."""
    sampled = settings.sampled_with(info.sampling.values())
    values: list[tuple[str, Any]] = [
        ("temperature", sampled.temperature), ("top_p", sampled.top_p),
        ("min_p", sampled.min_p), ("top_k", sampled.top_k),
        ("repeat_penalty", sampled.repetition_penalty),
        ("repeat_last_n", sampled.repetition_context),
        ("num_predict", settings.max_tokens), ("num_ctx", window)]
    eos = getattr(tokenizer, "eos_token", None)
    lines = [f"{name:<30} {value:g}" if isinstance(value, float) else f"{name:<30} {value}"
             for name, value in values if value is not None]
    if isinstance(eos, str) and eos:
        lines.append(f"{'stop':<30} \"{eos}\"")
    return "\n".join(lines)
