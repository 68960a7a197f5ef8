"""Settings and model commands: /set /get /model /models."""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlxchat.chat import (COMPUTE_DTYPES, CONTEXT_POLICIES, CPU_MATMUL_MODES, GENERATION_RULES, HISTORY_MODES,
                          REASONING_EFFORTS, SPECULATIVE_MODES, GenerationSettings,
                          generation_problem, human_bytes)
from mlxchat import blas
from mlxchat.commands import speculation
from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    field_docs,
    last_stats,
    one_line,
)
from mlxchat.config import remember
from mlxchat.paths import config_file
from mlxchat.units import fmt_int


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


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str, str], Any]
    rule: str
    """What values are allowed, in words."""
    choices: tuple[str, ...] = ()


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("temperature", _ranged(float), ">= 0 (0 is greedy)"),
    Setting("top_p", _ranged(float), "> 0 and <= 1"),
    Setting("min_p", _ranged(float), ">= 0 and < 1"),
    Setting("max_tokens", _ranged(int), ">= 1"),
    Setting("max_reasoning_tokens", _ranged(int), ">= 1"),
    Setting("thinking", _switch, "on, off or default", ("on", "off", "default")),
    Setting("reasoning_effort", _optional_word, "none, " + ", ".join(REASONING_EFFORTS),
            ("none", *REASONING_EFFORTS)),
    Setting("seed", _optional_int, "none or a whole number >= 0", ("none",)),
    Setting("repetition_penalty", _ranged(float), "> 0 (1 is off)"),
    Setting("kv_bits", _optional_int, "none, 4 or 8", ("none", "4", "8")),
    Setting("context_window", _optional_int, "none or a whole number >= 256 (at most the "
            "model's)", ("none",)),
    Setting("context_policy", _policy, " or ".join(CONTEXT_POLICIES), CONTEXT_POLICIES),
    Setting("history", _policy, " or ".join(HISTORY_MODES), HISTORY_MODES),
    Setting("speculative", _policy, ", ".join(SPECULATIVE_MODES), SPECULATIVE_MODES),
    Setting("draft", lambda name, raw: raw, "off, auto or a model spec", ("auto", "off")),
    Setting("draft_tokens", _ranged(int), "1 to 16"),
    Setting("compute_dtype", _dtype_word, "auto, " + ", ".join(COMPUTE_DTYPES),
            ("auto", *COMPUTE_DTYPES)),
    Setting("cpu_matmul", _policy, ", ".join(CPU_MATMUL_MODES), CPU_MATMUL_MODES),
    Setting("docs", _collection_name, GENERATION_RULES["docs"][1], ("off",)),
    Setting("docs_k", _ranged(int), GENERATION_RULES["docs_k"][1]),
    Setting("docs_budget", _optional_int, GENERATION_RULES["docs_budget"][1], ("auto",)),
)}


def show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else str(value)


def _check_template(ctx: CommandContext, name: str, value: Any) -> None:
    """thinking and reasoning_effort only where the chat template reads them."""
    variable = {"thinking": "enable_thinking", "reasoning_effort": "reasoning_effort"}.get(name)
    info = ctx.conversation.model_info
    if variable and value is not None and variable not in info.template_variables:
        raise CommandError(f"{info.name}'s chat template does not take {variable}, so "
                           f"{name} would change nothing.")


def _setting(raw: str) -> Setting:
    key = raw.lower().replace("-", "_")
    if key in SETTINGS:
        return SETTINGS[key]
    close = difflib.get_close_matches(key, list(SETTINGS), n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]}?" if close else f" Settings: {', '.join(SETTINGS)}."
    raise CommandError(f"Unknown setting {one_line(raw, 30)!r}.{hint}")


def _check_kv_bits(ctx: CommandContext, value: int | None) -> None:
    head_dim = ctx.conversation.model_info.head_dim
    if value and head_dim and head_dim % 32:
        raise CommandError(f"kv_bits needs a head size that is a multiple of 32; this model's "
                           f"is {head_dim}, so its KV cache cannot be quantized.")


def _check_window(ctx: CommandContext, value: int | None) -> None:
    info = ctx.conversation.model_info
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
        dtype = value or conv.model_info.default_compute_dtype
        if dtype != conv.model_info.compute_dtype:
            note = f" The next turn computes in {dtype}: a new token ledger, the cache cold."
    return CommandResult.info(f"{setting.name} = {show(value)} {where}.{note}",
                              clear_input=True)


def think(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    if not args.words:
        on = conv.generation.thinking
        return CommandResult.info(
            f"thinking is {'the model default' if on is None else show(on)} for this session "
            f"(/think on|off; this model marks reasoning as: {conv.model_info.reasoning}).")
    value = _switch("thinking", args.words[0])
    _check_template(ctx, "thinking", value)
    conv.update_generation(dataclasses.replace(conv.generation, thinking=value))
    return CommandResult.info(
        f"thinking {'follows the model default' if value is None else show(value)} for this "
        "session from the next message; earlier messages keep their tokens.",
        clear_input=True)


def get(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    current, defaults = conv.generation, conv.settings.generation
    docs = field_docs(GenerationSettings)
    if args.words:
        s = _setting(args.words[0])
        return CommandResult.info(
            f"{s.name} = {show(getattr(current, s.name))} (default "
            f"{show(getattr(defaults, s.name))}; allowed: {s.rule}). {docs.get(s.name, '')}"
            .rstrip())
    rows = [(s.name, show(getattr(current, s.name)), show(getattr(defaults, s.name)), s.rule,
             docs.get(s.name, "")) for s in SETTINGS.values()]
    return CommandResult.table(
        "Generation settings of this session (/set NAME VALUE; --default also saves it "
        f"for new sessions in {ctx.config_path or config_file()})",
        ("setting", "value", "default", "allowed", "meaning"), rows)


def complete_settings(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    docs = field_docs(GenerationSettings)
    if not words:
        return [(s.name, docs.get(s.name, s.rule)) for s in SETTINGS.values()]
    setting = SETTINGS.get(words[0].lower())
    if setting is None or len(words) > 1:
        return []
    if setting.choices:
        return [(c, setting.rule) for c in setting.choices]
    current = show(getattr(ctx.conversation.generation, setting.name))
    default = show(getattr(GenerationSettings(), setting.name))
    out = [(current, f"current · {setting.rule}")]
    return out + ([(default, f"built-in default · {setting.rule}")] if default != current
                  else [])


def complete_setting_names(ctx: CommandContext, words: tuple[str, ...],
                           prefix: str) -> Candidates:
    return complete_settings(ctx, (), prefix)


# -- /model /models -------------------------------------------------------------------


def _params(n: int) -> str:
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0", "")
    return str(n)


def _cpu_rows(ctx: CommandContext) -> list[tuple[str, str]]:
    """The BLAS serving MLX and how the last turn's quantized layers multiplied."""
    current = blas.status()
    last = last_stats(ctx)
    chosen = last.cpu_matmul if last is not None and last.cpu_matmul else (
        f"{ctx.conversation.generation.cpu_matmul}: chosen at the next turn")
    return [("BLAS", current.words() + (f" ({current.note})" if current.note else "")),
            ("cpu matmul", chosen + " (/set cpu_matmul auto|quantized|dequantized)")]


def model(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    if args.words:
        spec = args.words[0]
        if spec == conv.model_spec:
            return CommandResult.info(f"Already using {spec}.")
        info = conv.switch_model(spec).info
        return CommandResult.info(
            f"Switched to {info.name} ({info.quantization}, {_params(info.parameter_count)} "
            f"parameters, {fmt_int(info.context_window)}-token window); the KV cache in "
            "memory starts empty (what this conversation saved with this model is restored "
            "from disk at the next turn)." + (f" {info.memory_note}." if info.memory_note else "")
            + (f" {conv.speculation_notice}." if conv.speculation_notice else ""),
            session_changed=True, clear_input=True)
    info = conv.model_info
    rows = [("name", info.name), ("spec", info.spec), ("architecture", info.architecture),
            ("parameters", _params(info.parameter_count) + (
                f" total · {_params(info.active_parameter_count)} active per token"
                if 0 < info.active_parameter_count < info.parameter_count else "")),
            ("quantization", info.quantization + (f", scales {info.scales_dtype}"
                                                  if info.scales_dtype not in ("", "-") else "")
             + f" · computes in {info.compute_dtype}"
             + ("" if info.compute_dtype == info.default_compute_dtype
                else f" (this session; default {info.default_compute_dtype})")),
            ("bits per weight", f"{info.bits_per_weight:.2f} in memory"
             + (f" ({info.scales_dtype} scales)" if info.scales_dtype not in ("", "-") else "")),
            ("weights in memory", human_bytes(info.weights_bytes)),
            ("context window", f"{fmt_int(info.context_window)} tokens"),
            ("layers · kv heads · head dim",
             f"{info.num_layers} · {info.kv_heads} · {info.head_dim}"),
            ("device", info.device), ("folder", info.path)]
    if info.device == "cpu":
        rows[-1:-1] = _cpu_rows(ctx)
    state = conv.state()
    if state.layout:
        rows[7:7] = [("split across ranks", state.layout)] + [
            (f"rank {r.rank}", f"{human_bytes(r.weights_bytes)} weights · KV "
             f"{human_bytes(r.kv_bytes)} · peak {human_bytes(r.peak_memory_bytes)}")
            for r in state.ranks]
    return CommandResult.table("Current model (/model SPEC switches; /models lists them)",
                               ("", ""), rows)


def complete_models(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    from mlxchat.models import catalog

    return [(e.alias, one_line(e.description or e.source, 60))
            for e in catalog.list_entries()]


def models(ctx: CommandContext, args: Args) -> CommandResult:
    entries = list(ctx.list_models())
    current = ctx.conversation.model_spec
    rows = []
    for e in entries:
        size = (human_bytes(e.size_bytes) + ("" if e.size_on_disk else " download")
                if e.size_bytes else "?")
        rows.append((e.alias + (" *" if e.alias == current else ""),
                     f"{e.bits}-bit" if e.bits else "-",
                     size,
                     fmt_int(e.context_window) if e.context_window else "?",
                     e.fits,
                     "yes" if e.available_offline else "no",
                     one_line(e.description, 60)))
    if current not in {e.alias for e in entries}:
        info = ctx.conversation.model_info
        rows.append((f"{info.name} *", f"{info.bits_per_weight:.1f} b/w",
                     human_bytes(info.weights_bytes), fmt_int(info.context_window),
                     "loaded", "yes", f"loaded from {one_line(current, 50)}"))
    return CommandResult.table(
        "Models (* is loaded; /model ALIAS switches)",
        ("alias", "bits", "size", "context", "fits", "offline", "description"), rows,
        open_screen="models" if ctx.interactive else None)


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
    Command("model", model, "Show the loaded model, or switch to another",
            usage="/model [SPEC]", text=True, unquote=True, max_args=1,
            complete=complete_models,
            details="SPEC is a catalog alias (/models), a Hugging Face repo id, a local MLX "
                    "folder or a .gguf file."),
    Command("models", models, "List the catalog and local models, and which work offline",
            while_busy=True),
)
