"""Settings and model commands: /set /get /model /models."""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlxchat.commands import speculation
from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    one_line,
)
from mlxchat.config import remember
from mlxchat.generation import (
    COMPUTE_DTYPES,
    CONTEXT_POLICIES,
    CPU_MATMUL_MODES,
    GENERATION_RULES,
    HISTORY_MODES,
    REASONING_EFFORTS,
    SAMPLING,
    SPECULATIVE_MODES,
    TOOL_PROMPTS,
    GenerationSettings,
    generation_problem,
    setting_words,
)
from mlxchat.paths import config_file
from mlxchat.units import fmt_int

if TYPE_CHECKING:
    pass


def _number(name: str, raw: str, kind: type) -> Any:
    try:
        value = kind(raw)
    except (ValueError, OverflowError):
        raise CommandError(f"{name} takes {'a whole number' if kind is int else 'a number'}; "
                           f"got {one_line(raw, 30)!r}.") from None
    if kind is float and not math.isfinite(value):
        raise CommandError(f"{name} must be a finite number; got {one_line(raw, 30)!r}.")
    return value


def _allowed(name: str, value: Any, raw: str) -> Any:
    """Check against the one rule table in ``mlxchat.generation``."""
    if generation_problem(name, value):
        raise CommandError(f"{name} must be {GENERATION_RULES[name][1]}; "
                           f"got {one_line(raw, 30)!r}.")
    return value


def _ranged(kind: type) -> Callable[[str, str], Any]:
    def parse(name: str, raw: str) -> Any:
        return _allowed(name, _number(name, raw, kind), raw)
    return parse


def _optional_int(name: str, raw: str) -> Any:
    if raw.lower() in ("none", "off", "random", "auto"):
        return None
    return _allowed(name, _number(name, raw, int), raw)


def _policy(name: str, raw: str) -> str:
    return _allowed(name, raw.lower(), raw)


def _optional_word(name: str, raw: str) -> Any:
    return None if raw.lower() in ("none", "default") else _allowed(name, raw.lower(), raw)


def _dtype_word(name: str, raw: str) -> Any:
    return None if raw.lower() in ("auto", "none", "default") else _allowed(name, raw.lower(), raw)


def _collection_name(name: str, raw: str) -> Any:
    return None if raw.lower() in ("off", "none") else _allowed(name, raw, raw)


def _switch(name: str, raw: str) -> Any:
    words = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False,
             "none": None, "default": None}
    if raw.lower() not in words:
        raise CommandError(f"{name} takes on, off or default; got {one_line(raw, 30)!r}.")
    return words[raw.lower()]


def _on_off(name: str, raw: str) -> bool:
    value = _switch(name, raw)
    if value is None:
        raise CommandError(f"{name} takes on or off; got {one_line(raw, 30)!r}.")
    return value


def _sampling(name: str, raw: str) -> Any:
    if raw.lower() in ("model", "default", "auto", "none"):
        return None  # the model's own default
    return _allowed(name, _number(name, raw, float), raw)


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str, str], Any]
    rule: str
    """What values are allowed, in words."""
    meaning: str
    """What it does, in words for the user (one short line)."""
    choices: tuple[str, ...] = ()


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("temperature", _sampling, "model, or >= 0",
            "randomness of sampling; 0 always takes the likeliest token"),
    Setting("top_p", _sampling, "model, or > 0 and <= 1",
            "sample only from the likeliest tokens covering this share"),
    Setting("min_p", _sampling, "model, or >= 0 and < 1",
            "drop tokens less likely than this share of the likeliest one"),
    Setting("top_k", _optional_int, "none or a whole number >= 0 (0 is off)",
            "sample only from this many likeliest tokens", ("none",)),
    Setting("max_tokens", _ranged(int), ">= 1", "longest answer, in tokens"),
    Setting("max_reasoning_tokens", _ranged(int), ">= 1",
            "longest reasoning, in tokens (apart from the answer)"),
    Setting("thinking", _switch, "on, off or default",
            "reasoning before the answer, for models that can", ("on", "off", "default")),
    Setting("reasoning_effort", _optional_word, "default, " + ", ".join(REASONING_EFFORTS),
            "how hard the model reasons, for models that take it",
            ("default", *REASONING_EFFORTS)),
    Setting("seed", _optional_int, "none or a whole number >= 0",
            "fixes the random draws: the same seed, the same reply", ("none",)),
    Setting("repetition_penalty", _sampling, "model, or > 0 (1 is off)",
            "makes recently written tokens less likely"),
    Setting("repetition_context", _ranged(int), GENERATION_RULES["repetition_context"][1],
            "tokens the repetition penalty looks back over (-1: all, 0: off)"),
    Setting("kv_bits", _optional_int, "none, 4 or 8",
            "stores the KV cache in 4 or 8 bits: less memory", ("none", "4", "8")),
    Setting("context_window", _optional_int, "none or a whole number >= 256 (at most the "
            "model's)", "a smaller context window than the model's", ("none",)),
    Setting("context_policy", _policy, GENERATION_RULES["context_policy"][1],
            "when the window is full: switch to a compaction prepared ahead, drop the oldest "
            "messages, or stop", CONTEXT_POLICIES),
    Setting("compact_at", _ranged(int), GENERATION_RULES["compact_at"][1],
            "past this share of the window (percent), the compaction is prepared"),
    Setting("recall", _on_off, "on or off",
            "bring back earlier messages no longer in the window that match a new one",
            ("on", "off")),
    Setting("history", _policy, " or ".join(HISTORY_MODES),
            "ledger: earlier turns keep their tokens; template: render them again",
            HISTORY_MODES),
    Setting("speculative", _policy, ", ".join(SPECULATIVE_MODES),
            "speculative decoding: a guess checked in one pass, same reply",
            SPECULATIVE_MODES),
    Setting("draft", lambda name, raw: raw, "off, auto or a model spec",
            "the small model that guesses for speculative decoding", ("auto", "off")),
    Setting("draft_tokens", _ranged(int), "1 to 16", "tokens guessed per checking pass"),
    Setting("compute_dtype", _dtype_word, "auto, " + ", ".join(COMPUTE_DTYPES),
            "the float type the model computes in", ("auto", *COMPUTE_DTYPES)),
    Setting("cpu_matmul", _policy, ", ".join(CPU_MATMUL_MODES),
            "how quantized layers multiply on a CPU (auto: measured)", CPU_MATMUL_MODES),
    Setting("docs", _collection_name, GENERATION_RULES["docs"][1],
            "the document collection each message searches", ("off",)),
    Setting("docs_k", _ranged(int), GENERATION_RULES["docs_k"][1],
            "at most this many passages found per message"),
    Setting("docs_budget", _optional_int, GENERATION_RULES["docs_budget"][1],
            "tokens the found passages may take (auto: 1/8 of the window, at least 512)", ("auto",)),
    Setting("tools", _collection_name, GENERATION_RULES["tools"][1],
            "the MCP tools the model may call (/tools lists them)", ("off", "*")),
    Setting("tool_timeout", _ranged(float), GENERATION_RULES["tool_timeout"][1],
            "seconds a tool call may take"),
    Setting("tool_result_tokens", _optional_int, GENERATION_RULES["tool_result_tokens"][1],
            "tokens a tool's result may take (auto: a tenth of the window)", ("auto",)),
    Setting("max_tool_steps", _ranged(int), GENERATION_RULES["max_tool_steps"][1],
            "tool calls the model may chain for one message"),
    Setting("tool_prompt", _policy, " or ".join(TOOL_PROMPTS),
            "generic: describe tools in the system prompt when the template cannot",
            TOOL_PROMPTS),
)}


def show(value: Any, name: str = "") -> str:
    """A value as ``/set`` takes it back (``name``: the word for one left unset)."""
    return setting_words(name, value)


def model_default(ctx: CommandContext, name: str) -> tuple[float, str]:
    """A sampling setting's value under 'model', and where it comes from."""
    sampling = ctx.conversation.views.model_info.sampling
    source = sampling.source if name in sampling.named() else "built in"
    return sampling.values()[name], source


def _model_words(ctx: CommandContext) -> str:
    """What 'model' means in the /get table, for the loaded model."""
    sampling = ctx.conversation.views.model_info.sampling
    if not sampling.named():
        return "mlxchat's built-in defaults (the model names none)"
    rest = "" if sampling.named() == set(SAMPLING) else ", built in for those it names none"
    return f"the model's own default, from {sampling.source}{rest}"


def shown(ctx: CommandContext, name: str, value: Any) -> str:
    """A setting's value as the /get table says it: 'model' with the number it gives."""
    if name in SAMPLING and value is None:
        return f"model: {model_default(ctx, name)[0]:g}"
    return show(value, name)


def _check_template(ctx: CommandContext, name: str, value: Any) -> None:
    """thinking and reasoning_effort only where the chat template reads them."""
    variable = {"thinking": "enable_thinking", "reasoning_effort": "reasoning_effort"}.get(name)
    info = ctx.conversation.views.model_info
    if variable and value is not None and variable not in info.template_variables:
        raise CommandError(f"{info.name}'s chat template does not take {variable}, so "
                           f"{name} would change nothing.")


def _setting(raw: str) -> Setting:
    key = raw.lower().replace("-", "_")
    if key in SETTINGS:
        return SETTINGS[key]
    close = difflib.get_close_matches(key, list(SETTINGS), n=1, cutoff=0.6)
    if close:
        raise CommandError(f"Unknown setting {one_line(raw, 30)!r}. Did you mean {close[0]}?")
    raise CommandError(f"Unknown setting {one_line(raw, 30)!r}. The {len(SETTINGS)} settings "
                       "(/get lists them with their values):", more=", ".join(SETTINGS) + ".")


def _check_kv_bits(ctx: CommandContext, value: int | None) -> None:
    head_dim = ctx.conversation.views.model_info.head_dim
    if value and head_dim and head_dim % 32:
        raise CommandError(f"kv_bits needs a head size that is a multiple of 32; this model's "
                           f"is {head_dim}, so its KV cache cannot be quantized.")


def _check_window(ctx: CommandContext, value: int | None) -> None:
    info = ctx.conversation.views.model_info
    if value and value > info.context_window:
        raise CommandError(f"context_window can only lower {info.name}'s window of "
                           f"{fmt_int(info.context_window)} tokens (what it was trained for, or "
                           f"what fits this machine's memory); got {fmt_int(value)}.")


def _check_setting(ctx: CommandContext, name: str, value: Any) -> None:
    if name == "kv_bits":
        _check_kv_bits(ctx, value)
    if name == "context_window":
        _check_window(ctx, value)
    if name == "docs" and value is not None:
        ctx.conversation.retrieval.collection(value)  # one line when there is none
    _check_template(ctx, name, value)


def set_(ctx: CommandContext, args: Args) -> CommandResult:
    setting = _setting(args.words[0])
    value = setting.parse(setting.name, args.words[1])
    per_session = setting.name == "draft" or (setting.name == "speculative"
                                              and value not in ("auto", "off"))
    if per_session and "--default" in args.flags:
        raise CommandError(f"{setting.name} {value} is set per session (it loads a model or "
                           "depends on this one's caches); /set it without --default "
                           "(auto and off can be defaults).")
    if setting.name in ("draft", "speculative"):
        # Loads or unloads the draft model, checked against this model first.
        result = (speculation.set_draft if setting.name == "draft" else speculation.set_mode)(
            ctx, value)
        if "--default" not in args.flags:
            return result
    else:
        _check_setting(ctx, setting.name, value)
    conv = ctx.conversation
    conv.update_generation(dataclasses.replace(conv.generation, **{setting.name: value}))
    where = "for this session"
    if "--default" in args.flags:
        conv.settings.generation = dataclasses.replace(conv.settings.generation,
                                                       **{setting.name: value})
        path = remember(f"generation.{setting.name}", value, ctx.config_path)
        where += f" and as the default for new sessions (saved to {path})"
    note = ""
    if setting.name == "kv_bits":
        note = (" The next turn quantizes the cache." if value else
                " The next turn recomputes the cache at full precision.")
    if setting.name == "compute_dtype":
        dtype = value or conv.views.model_info.default_compute_dtype
        if dtype != conv.views.model_info.compute_dtype:
            note = f" The next turn computes in {dtype}: a new token ledger, the cache cold."
    return CommandResult.info(f"{setting.name} = {show(value, setting.name)} {where}.{note}",
                              clear_input=True)


def think(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    if not args.words:
        on = conv.generation.thinking
        return CommandResult.info(
            f"thinking is {'the model default' if on is None else show(on)} for this session "
            f"(/think on|off; this model marks reasoning as: {conv.views.model_info.reasoning}).")
    value = _switch("thinking", args.words[0])
    _check_template(ctx, "thinking", value)
    conv.update_generation(dataclasses.replace(conv.generation, thinking=value))
    return CommandResult.info(
        f"thinking {'follows the model default' if value is None else show(value)} for this "
        "session from the next message; earlier messages keep their tokens.",
        clear_input=True)


def _get_one(ctx: CommandContext, s: Setting) -> CommandResult:
    """'NAME = VALUE · new sessions: … · allowed: … · meaning': one level of
    parentheses at most (where a model's own default comes from)."""
    conv = ctx.conversation
    value = getattr(conv.generation, s.name)
    now = show(value, s.name)
    if s.name in SAMPLING and value is None:
        number, source = model_default(ctx, s.name)
        now += f", {number:g} here ({source})"
    default = show(getattr(conv.settings.generation, s.name), s.name)
    return CommandResult.info(f"{s.name} = {now} · new sessions: {default} · allowed: "
                              f"{s.rule} · {s.meaning}.")


def get(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    current, defaults = conv.generation, conv.settings.generation
    if args.words:
        return _get_one(ctx, _setting(args.words[0]))
    rows = [(s.name, shown(ctx, s.name, getattr(current, s.name)),
             show(getattr(defaults, s.name), s.name), s.rule, s.meaning)
            for s in SETTINGS.values()]
    return CommandResult.table(
        "Generation settings of this session (/set NAME VALUE; --default also saves it "
        f"for new sessions in {ctx.config_path or config_file()}). model: "
        + _model_words(ctx), 
        ("setting", "value", "new sessions", "allowed", "meaning"), rows)


def complete_settings(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    if not words:
        return [(s.name, s.meaning) for s in SETTINGS.values()]
    setting = SETTINGS.get(words[0].lower())
    if setting is None or len(words) > 1:
        return []
    if setting.choices:
        return [(c, setting.rule) for c in setting.choices]
    current = show(getattr(ctx.conversation.generation, setting.name), setting.name)
    default = show(getattr(GenerationSettings(), setting.name), setting.name)
    out = [(current, f"current · {setting.rule}")]
    what = "the model's default" if setting.name in SAMPLING else "built-in default"
    return out + ([(default, f"{what} · {setting.rule}")] if default != current else [])


def complete_setting_names(ctx: CommandContext, words: tuple[str, ...],
                           prefix: str) -> Candidates:
    return complete_settings(ctx, (), prefix)


COMMANDS = (
    Command("set", set_, "Change a generation setting of this session",
            usage="/set [--default] NAME VALUE", min_args=2, max_args=2,
            flags=("--default",), complete=complete_settings,
            details="Settings: " + "; ".join(f"{s.name} ({s.rule})" for s in SETTINGS.values())
            + ". --default also saves it as the default for new sessions."),
    Command("think", think, "Turn the model's reasoning on or off for this session",
            usage="/think [on|off|default]", max_args=1,
            complete=lambda ctx, words, prefix: [] if words else [
                ("on", "reason before answering"), ("off", "answer directly"),
                ("default", "the template's default")],
            details="Passed to the chat template as enable_thinking (Qwen3 and others that "
                    "read it); the reasoning shows folded above the answer."),
    Command("get", get, "Show the generation settings, or one of them", usage="/get [NAME]",
            max_args=1, complete=complete_setting_names, while_busy=True),
)
