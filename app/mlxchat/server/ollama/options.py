"""Ollama's ``options`` and its other request-wide fields (``think``,
``keep_alive``, ``logprobs``), shared by /api/chat and /api/generate: each one
served, accepted for what it describes (how the model is loaded, which the
server decided at start), or refused in words: never ignored in silence."""

from __future__ import annotations

from typing import Any

from mlxchat.engine.turn.reply_options import MAX_TOP_LOGPROBS, ReplyOptions
from mlxchat.generation import REASONING_EFFORTS
from mlxchat.server.core.errors import ApiError, bad_field
from mlxchat.server.core.requests import number, sampling, stop_strings, whole_number

LOADING = ("num_ctx", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all",
           "vocab_only", "use_mmap", "use_mlock", "numa", "num_thread", "embedding_only")
"""How Ollama would load the model: the server loaded it once at start, so these
are accepted and change nothing (``/api/show`` and ``/api/ps`` say what it has)."""

NEUTRAL = {"mirostat": 0, "typical_p": 1.0, "tfs_z": 1.0}
"""Sampling options this server does not have, accepted at the value that turns them off."""

REPEAT_WINDOW = 20
"""Tokens ``repeat_penalty`` looks back over (mlx-lm's repetition context)."""

SERVED = ("temperature", "top_p", "top_k", "min_p", "seed", "num_predict", "stop",
          "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty")

RETIRED = ("penalize_newline",)
"""Options Ollama itself no longer reads: accepted, as it does."""


def unbounded_num_predict(options: dict[str, Any]) -> bool:
    """Ollama's ``num_predict`` -1 (no limit) and -2 (fill the context): both run
    until the model stops or the context window is full."""
    value = options.get("num_predict")
    return isinstance(value, int) and not isinstance(value, bool) and value in (-1, -2)


def _refused(name: str, why: str) -> ApiError:
    return bad_field(f"options.{name}", f"'options.{name}' is not supported: {why}")


def _unserved(options: dict[str, Any]) -> None:
    """A 400 for each option that would change the reply and cannot."""
    for name, value in options.items():
        if name in SERVED or name in LOADING or name in RETIRED or value is None:
            continue
        if name in NEUTRAL:
            off = NEUTRAL[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != off:
                raise _refused(name, f"this server has no such sampler (only {off} is "
                               "accepted, which turns it off).")
            continue
        raise bad_field(f"options.{name}", f"'options.{name}' is not an option this server "
                        "knows; see docs/server.md for the ones it takes.")
    penalty = options.get("repeat_penalty")
    last_n = options.get("repeat_last_n")
    if last_n is not None and penalty not in (None, 1, 1.0) and last_n != REPEAT_WINDOW:
        raise _refused("repeat_last_n", f"repeat_penalty looks back over the last "
                       f"{REPEAT_WINDOW} tokens here; leave it out or give {REPEAT_WINDOW}.")


def option_settings(data: dict[str, Any], *, window: int | None) -> dict[str, Any]:
    """The generation settings ``options`` gives, every one checked."""
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise bad_field("options", "'options' must be an object.")
    _unserved(options)
    bounded = options
    if unbounded_num_predict(options):
        bounded = {k: v for k, v in options.items() if k != "num_predict"}
    else:
        try:
            whole_number(options, "num_predict", 1)
        except ApiError:
            raise bad_field("num_predict", "'num_predict' must be a whole number >= 1, or -1 "
                            "or -2.") from None
    settings = sampling(bounded, max_names=("num_predict",), window=window)
    if unbounded_num_predict(options) and window is not None:
        settings["max_tokens"] = window  # the engine stops where the window is full
    min_p = number(options, "min_p", 0.0, 1.0)
    if min_p is not None:
        settings["min_p"] = min_p
    penalty = number(options, "repeat_penalty", 0.0, 10.0)
    if penalty is not None:
        settings["repetition_penalty"] = penalty if penalty > 0 else 1.0  # 0: off in Ollama
    return settings


def stops(data: dict[str, Any]) -> list[str]:
    options = data.get("options") or {}
    return stop_strings(options.get("stop") if isinstance(options, dict) else None)


def thinking(data: dict[str, Any]) -> dict[str, Any]:
    """``think``: true or false (the template's enable_thinking), or gpt-oss's
    effort ("low", "medium", "high")."""
    think = data.get("think")
    if think is None:
        return {}
    if isinstance(think, bool):
        return {"thinking": think}
    if isinstance(think, str) and think in REASONING_EFFORTS:
        return {"thinking": True, "reasoning_effort": think}
    raise bad_field("think", "'think' must be true, false or one of "
                    + ", ".join(f'"{e}"' for e in REASONING_EFFORTS) + ".")


def reply_options(data: dict[str, Any]) -> ReplyOptions:
    """``logprobs`` (each token's, the model's own log-softmax), ``top_logprobs``
    (its alternatives, 0 to 20) and the presence and frequency penalties of
    ``options``."""
    asked = data.get("logprobs")
    if asked is not None and not isinstance(asked, bool):
        raise bad_field("logprobs", "'logprobs' must be true or false.")
    top = whole_number(data, "top_logprobs", 0)
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise bad_field("top_logprobs", f"'top_logprobs' may be at most {MAX_TOP_LOGPROBS}; "
                        f"got {top}.")
    if top and not asked:
        raise bad_field("top_logprobs", "'top_logprobs' needs 'logprobs': true.")
    options = data.get("options") if isinstance(data.get("options"), dict) else {}
    penalties = {name: value for name in ("presence_penalty", "frequency_penalty")
                 if (value := number(options, name, -2.0, 2.0)) is not None}
    return ReplyOptions(logprobs=(top or 0) if asked else None, **penalties)


def request_wide(data: dict[str, Any]) -> bool:
    """``stream`` (default true) after checking ``keep_alive``, which is accepted
    (the model stays loaded while the server runs)."""
    keep_alive = data.get("keep_alive")
    if keep_alive is not None and (isinstance(keep_alive, bool)
                                   or not isinstance(keep_alive, (int, float, str))):
        raise bad_field("keep_alive", "'keep_alive' must be a duration (\"5m\") or seconds.")
    stream = data.get("stream", True)
    if not isinstance(stream, bool):
        raise bad_field("stream", "'stream' must be true or false.")
    return stream


def unloads(data: dict[str, Any]) -> bool:
    """``keep_alive`` 0: Ollama's way to unload the model."""
    keep_alive = data.get("keep_alive")
    return keep_alive in (0, "0", "0s", "0m") and not isinstance(keep_alive, bool)
