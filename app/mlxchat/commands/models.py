"""/model and /models: the loaded model described or switched (and what the
switch leaves of the KV cache), and the catalog with what fits here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlxchat import blas, native
from mlxchat.chat import human_bytes
from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandResult,
    last_stats,
    one_line,
)
from mlxchat.units import fmt_int

if TYPE_CHECKING:
    from mlxchat.session.conversation import Conversation


def _params(n: int) -> str:
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0", "")
    return str(n)


def _kv_after_switch(conv: Conversation) -> str:
    """What the next turn will find of the conversation's KV cache, as checked now."""
    if not conv.messages:
        return "the KV cache in memory starts empty"
    saved = conv.cache.saved_for_model()
    if saved:
        return (f"the KV cache in memory starts empty; the next turn brings back from disk the "
                f"{fmt_int(saved)} tokens this conversation saved with this model")
    return ("the KV cache in memory starts empty and nothing this conversation saved was made "
            "with this model: the next turn computes its history once")


def _cpu_rows(ctx: CommandContext) -> list[tuple[str, str]]:
    """The BLAS serving MLX and how the last turn's quantized layers multiplied."""
    current = blas.status()
    last = last_stats(ctx)
    chosen = last.cpu_matmul if last is not None and last.cpu_matmul else (
        f"{ctx.conversation.generation.cpu_matmul}: chosen at the next turn")
    return [("BLAS", current.words() + (f" ({current.note})" if current.note else "")),
            ("cpu matmul", chosen + " (/set cpu_matmul auto|quantized|dequantized|native|int8)"),
            ("native kernel", native.status().words()
             + (f" ({native.status().note})" if native.status().note else ""))]


def model(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    if args.words:
        spec = args.words[0]
        if spec == conv.model_spec:
            return CommandResult.info(f"Already using {spec}.")
        info = conv.switch_model(spec).info
        return CommandResult.info(
            f"Switched to {info.name} ({info.quantization}, {_params(info.parameter_count)} "
            f"parameters, {fmt_int(info.context_window)}-token window); {_kv_after_switch(conv)}."
            + (f" {info.memory_note}." if info.memory_note else "")
            + (f" {conv.speculation.notice}." if conv.speculation.notice else ""),
            session_changed=True, clear_input=True)
    info = conv.views.model_info
    state = conv.views.state()
    copies = state.kept_copies_bytes
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
            ("weights in memory", human_bytes(info.weights_bytes) + (
                f" + {human_bytes(copies)} of float32 copies for the CPU's matmuls "
                f"({human_bytes(info.weights_bytes + copies)} in all)" if copies else "")),
            ("context window", f"{fmt_int(info.context_window)} tokens"),
            ("images", "sees images (/image PATH)" if info.sees_images else "text only"),
            ("layers · kv heads · head dim",
             f"{info.num_layers} · {info.kv_heads} · {info.head_dim}"),
            ("device", info.device), ("folder", info.path)]
    if info.device == "cpu":
        rows[-1:-1] = _cpu_rows(ctx)
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
                     ("sees images · " if e.images else "") + one_line(e.description, 60)))
    if current not in {e.alias for e in entries}:
        info = ctx.conversation.views.model_info
        rows.append((f"{info.name} *", f"{info.bits_per_weight:.1f} b/w",
                     human_bytes(info.weights_bytes), fmt_int(info.context_window),
                     "loaded", "yes", f"loaded from {one_line(current, 50)}"))
    return CommandResult.table(
        "Models (* is loaded; /model ALIAS switches)",
        ("alias", "bits", "size", "context", "fits", "offline", "description"), rows,
        open_screen="models" if ctx.interactive else None)


COMMANDS = (
    Command("model", model, "Show the loaded model, or switch to another",
            usage="/model [SPEC]", text=True, unquote=True, max_args=1,
            complete=complete_models,
            details="SPEC is a catalog alias (/models), a Hugging Face repo id, a local MLX "
                    "folder or a .gguf file."),
    Command("models", models, "List the catalog and local models, and which work offline",
            while_busy=True),
)
