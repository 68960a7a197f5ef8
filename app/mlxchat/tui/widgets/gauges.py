"""Context window, KV cache, weights and last-turn gauges, plus live progress.

A sidebar at wide sizes and a two-line bar when narrow: both views are always
composed and the stylesheet shows one, on the screen's breakpoint class.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Callable, TypeVar

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.markup import escape
from textual.widgets import Static

from mlxchat.chat import human_bytes
from mlxchat.engine.events import EngineState, PrefillProgress, RankFigures
from mlxchat.tui.formatting import (
    cache_source_label,
    fmt_bits_per_weight,
    fmt_precision,
    kv_bits_label,
    kv_room,
    speculation_text,
    usage_level,
)
from mlxchat.tui.widgets.gauge_text import FittedLine, GaugeText, Part, part
from mlxchat.tui.widgets.meter import Meter
from mlxchat.tui.widgets.spinner import Spinner
from mlxchat.turn_stats import TurnStats
from mlxchat.units import fmt_gauge_percent, fmt_int, fmt_seconds, fmt_tps, plural

SOURCE_STYLES = {"warm": "$success", "snapshot": "$accent", "cold": "$warning",
                 "typed": "$success"}


_F = TypeVar("_F", bound=Callable[..., Any])


def _while_composed(method: _F) -> _F:
    """A figure that arrives as the app tears the panel down (a timer's late
    tick finds its parts gone) is dropped; at any other time it is a mistake."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except NoMatches:
            if self._closing or self._closed or self._pruning or self.app._exit:
                return None
            raise
    return guarded  # type: ignore[return-value]


def source_badge(source: str) -> str:
    style = SOURCE_STYLES.get(source, "$foreground")
    return f"[b {style}]{escape(cache_source_label(source))}[/]"


def _miss_markup(stats: TurnStats) -> str:
    """The miss reason in the warning colour; a new conversation plainly."""
    words = escape(stats.miss_words or "")
    return words if stats.new_conversation else f"[$warning]{words}[/]"


def rank_line(figures: RankFigures) -> str:
    """'rank 1: 26.8 MB · KV 1.2 MB · peak 80.1 MB', as that rank measured it."""
    return (f"rank {figures.rank}: {human_bytes(figures.weights_bytes)} · KV "
            f"{human_bytes(figures.kv_bytes)} · peak {human_bytes(figures.peak_memory_bytes)}")


def _held_text(state: EngineState) -> str:
    """What the process holds for the model: its weights, and the float32
    copies the CPU's matmuls keep beside them, said apart."""
    copies = state.kept_copies_bytes
    if not copies:
        return f"{human_bytes(state.weights_bytes)} in memory\n"
    return (f"{human_bytes(state.weights_bytes + copies)} in memory:\n"
            f"  {human_bytes(state.weights_bytes)} weights\n"
            f"  {human_bytes(copies)} float32 copies (CPU)\n")


class GaugesPanel(Vertical):
    """Shows exactly the figures it is given; it never measures anything itself.

    Feed it ``update_state`` after each turn (and on load), ``update_stats`` with a
    turn's stats, and ``prefill`` / ``decoding`` / ``idle`` while a turn runs.
    """

    DEFAULT_CSS = """
    GaugesPanel { height: auto; }
    GaugesPanel > #gauges-compact { display: none; height: auto; }
    GaugesPanel > #gauges-full { height: auto; }
    GaugesPanel #gauges-figures { height: auto; }
    GaugesPanel .gauge { height: auto; }
    GaugesPanel .gauge Static { height: auto; }
    GaugesPanel #compact-row { height: 1; }
    GaugesPanel #compact-context-meter { width: 12; margin: 0 1; }
    GaugesPanel #compact-context, GaugesPanel #compact-live {
        width: 1fr; height: 1; text-wrap: nowrap; text-overflow: ellipsis;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.state: EngineState | None = None
        self.context_tokens: int | None = None
        self.budget_bytes: int = 0
        self.stats: TurnStats | None = None
        self._live: str = "idle"
        self._spinner = Spinner(self, self._show_wait)

    def compose(self) -> ComposeResult:
        with Vertical(id="gauges-full"):
            with VerticalScroll(id="gauges-figures"):  # scrolls where they do not fit
                yield from self._figures()
            with Vertical(id="gauge-live", classes="gauge") as box:  # always on screen
                box.border_title = "Now"
                yield Meter(id="live-meter")
                yield GaugeText("idle", id="live-text")
        with Vertical(id="gauges-compact"):
            with Horizontal(id="compact-row"):
                yield Static("ctx", id="compact-label")
                yield Meter(id="compact-context-meter")
                yield FittedLine(id="compact-context")
            yield FittedLine("idle", id="compact-live")

    @staticmethod
    def _figures() -> ComposeResult:
        yield GaugeText("no model loaded", id="gauge-model", markup=False)
        with Vertical(id="gauge-context", classes="gauge") as box:
            box.border_title = "Context"
            yield Meter(id="context-meter")
            yield GaugeText(id="context-text")
        with Vertical(id="gauge-kv", classes="gauge") as box:
            box.border_title = "KV cache"
            yield Meter(id="kv-meter")
            yield GaugeText("empty", id="kv-source")
            yield GaugeText(id="kv-text")
        with Vertical(id="gauge-weights", classes="gauge") as box:
            box.border_title = "Weights"
            yield GaugeText(id="weights-text")
        with Vertical(id="gauge-turn", classes="gauge") as box:
            box.border_title = "Last turn"
            yield GaugeText("no turn yet", id="turn-text")

    def on_mount(self) -> None:
        self.query_one("#live-meter", Meter).display = False
        self._render_state()
        stats = self.stats or (self.state.last_stats if self.state else None)
        if stats is not None:
            self._show_stats(stats)

    # -- inputs -----------------------------------------------------------------

    @_while_composed
    def update_state(self, state: EngineState, budget_bytes: int, *,
                     context_tokens: int | None = None) -> None:
        """Engine figures after a turn or a load; ``budget_bytes`` is the KV memory
        budget; ``context_tokens``, what the open conversation holds in the window
        when the KV cache holds another one's tokens (a new chat), else None."""
        self.state = state
        self.budget_bytes = budget_bytes
        self.context_tokens = context_tokens
        if not self.is_mounted:
            return  # on_mount renders what was stored
        self._render_state()
        if state.last_stats is not None:
            self.update_stats(state.last_stats)
        elif self._live == "idle":
            self._text("#compact-live", self._compact_idle_text())

    @_while_composed
    def update_stats(self, stats: TurnStats | None) -> None:
        """A turn's figures; None (a session without a turn yet) shows 'no turn yet'."""
        self.stats = stats
        if self.is_mounted:
            self._show_stats(stats)

    def _show_stats(self, stats: TurnStats | None) -> None:
        self._text("#turn-text", "no turn yet" if stats is None else self._turn_text(stats))
        if self._live == "idle":
            self._text("#compact-live", self._compact_idle_text())

    def _compact_idle_text(self) -> str | list[Part]:
        if self.stats is not None:
            return self._compact_turn_text(self.stats)
        if self.state is not None and self.state.cached_tokens:
            return self._source_text(self.state)
        return "idle"

    @staticmethod
    def _source_text(state: EngineState) -> str:
        """Where the cached tokens came from: after a resume, 'from snapshot'."""
        if not state.cached_tokens:
            return "empty"
        return f"{source_badge(state.cache_source)} · {fmt_int(state.cached_tokens)} tokens"

    @_while_composed
    def waiting(self, what: str) -> None:
        """A turn started and has nothing to count yet: what it waits for
        ('restoring this branch's KV cache from disk'), with a spinner."""
        self._live = "wait"
        self._hide_live_meter()
        self._spinner.start(what)

    @_while_composed
    def _show_wait(self, line: str) -> None:
        self._text("#live-text", line)
        self._text("#compact-live", line)

    @_while_composed
    def prefill(self, progress: PrefillProgress) -> None:
        self._live = "prefill"
        self._spinner.stop()
        meter = self.query_one("#live-meter", Meter)
        meter.display = True
        meter.set_value(progress.done / progress.total if progress.total else 0.0)
        counts = f"{fmt_int(progress.done)} / {fmt_int(progress.total)} tokens"
        self._text("#live-text", f"prefill {counts}\n{fmt_tps(progress.tps)}")
        self._text("#compact-live", f"[b]prefill[/] {counts} · {fmt_tps(progress.tps)}")

    @_while_composed
    def typing_prefill(self, tokens: int) -> None:
        """While the user types (no turn running): what is prefilled already."""
        if self._live != "idle":
            return
        if not tokens:
            return self.idle()
        line = f"prefilled while typing: {fmt_int(tokens)} tokens"
        self._text("#live-text", line)
        self._text("#compact-live", line)

    @_while_composed
    def live_cache(self, cached_tokens: int, kv_bytes: int) -> None:
        """The Context and KV cache figures as the running turn fills the cache."""
        if self.state is None or not cached_tokens:
            return
        self.state = replace(self.state, cached_tokens=cached_tokens, kv_bytes=kv_bytes,
                             cache_source="warm")
        self.context_tokens = None  # a running turn's cache is its conversation's
        self._render_state()

    @_while_composed
    def decoding(self, generated_tokens: int, tps: float | None, part: str = "answer", *,
                 speculation: Any = None) -> None:
        """``speculation``: anything with ``acceptance`` and ``tokens_per_pass``
        (None on both, or no object, when not speculating)."""
        self._live = "decode"
        self._spinner.stop()
        self._hide_live_meter()
        tokens = plural(generated_tokens, "token")
        verb = "thinking" if part == "reasoning" else "decoding"
        spec = ""
        if speculation is not None and speculation.tokens_per_pass is not None:
            spec = speculation_text(speculation.acceptance, speculation.tokens_per_pass)
        self._text("#live-text", f"{verb} {tokens}\n{fmt_tps(tps)}" + (f"\n{spec}" if spec else ""))
        self._text("#compact-live", f"[b]{verb}[/] {tokens} · {fmt_tps(tps)}"
                   + (f" · {spec}" if spec else ""))

    @_while_composed
    def idle(self) -> None:
        self._live = "idle"
        self._spinner.stop()
        self._hide_live_meter()
        self._text("#live-text", "idle")
        self._text("#compact-live", self._compact_idle_text())

    # -- rendering ---------------------------------------------------------------

    def _hide_live_meter(self) -> None:
        meter = self.query_one("#live-meter", Meter)
        if meter.display:  # hiding it again would still cost a layout pass
            meter.display = False

    def _text(self, selector: str, markup: str | list[Part]) -> None:
        self.query_one(selector, GaugeText).show(markup)  # type: ignore[arg-type]

    def _render_state(self) -> None:
        state = self.state
        if state is None:
            return
        window, held = state.context_window, state.cached_tokens
        used = held if self.context_tokens is None else self.context_tokens
        level = usage_level(used, window)
        ctx_fraction = used / window if window else 0.0
        pinned, mark = state.pinned_tokens, state.compact_at / window if window else 0.0
        for meter_id in ("#context-meter", "#compact-context-meter"):
            self.query_one(meter_id, Meter).set_value(ctx_fraction, level,
                                                      pinned / window if window else 0.0, mark)
        self._text("#gauge-model", state.model_name or "no model loaded")
        self._text("#context-text",
                   f"{fmt_int(used)} / {fmt_int(window)} tokens  "
                   f"[b]{fmt_gauge_percent(used, window)}[/]"
                   + ("\n[dim]held in the KV cache[/]" if used == held else
                      f"\n[dim]in this chat · the KV cache holds {fmt_int(held)}[/]")
                   + (f"\n[$accent]█[/] pinned {fmt_int(pinned)}" if pinned else "")
                   + (f"\n[$warning]│[/] compacts past {fmt_int(state.compact_at)}"
                      + (f" · {escape(state.compaction)}" if state.compaction else "")
                      if state.compact_at else ""))

        bits = kv_bits_label(state.kv_bits, state.kv_dtype)
        box = self.query_one("#gauge-kv")
        if box.border_title != (title := f"KV cache · {bits}"):
            box.border_title = title
        self._text("#kv-source", self._source_text(state))
        budget = self.budget_bytes
        self.query_one("#kv-meter", Meter).set_value(
            state.kv_bytes / budget if budget else 0.0, usage_level(state.kv_bytes, budget))
        room = kv_room(kv_bytes=state.kv_bytes, cached_tokens=held,
                       budget_bytes=budget, context_window=window, layout=state.kv_layout)
        lines = [
            (f"{human_bytes(state.kv_bytes)} · {fmt_gauge_percent(state.kv_bytes, budget)}"
             f" of {human_bytes(budget)} budget"),
            f"room [b]{fmt_int(room.tokens)}[/] tokens ({room.limit} limit)",
        ]
        if state.draft_kv_bytes:
            lines.append(f"+ draft {escape(state.draft_model)} {human_bytes(state.draft_kv_bytes)}")
        if state.api_kv_bytes:
            lines.append(f"+ API server {human_bytes(state.api_kv_bytes)}")
        if not room.grows:
            lines.append("memory: the cache stopped growing (its windows are full)")
        elif room.by_memory is None:
            lines.append("memory rate: after the first turn")
        elif room.limit == "window":
            lines.append(f"memory would fit {fmt_int(room.by_memory)} tokens")
        else:
            lines.append(f"window has {fmt_int(room.by_window)} tokens left")
        self._text("#kv-text", "\n".join(lines))

        self._text("#weights-text",
                   (f"{escape(state.layout)}\n" if state.layout else "")
                   + "".join(f"{rank_line(r)}\n" for r in state.ranks)
                   + _held_text(state)
                   + f"{fmt_bits_per_weight(state.bits_per_weight, state.scales_dtype)}\n"
                   + (f"{fmt_precision(state.quantization, state.compute_dtype)}\n"
                      if state.compute_dtype else "") +
                   f"peak memory {human_bytes(state.peak_memory_bytes)}")
        kv = f"KV {human_bytes(state.kv_bytes)}"
        self._text("#compact-context", [
            part(f"{fmt_gauge_percent(used, window)} {fmt_int(used)}/{fmt_int(window)}"),
            part(f"{kv} {bits} {fmt_gauge_percent(state.kv_bytes, budget)}", kv, rank=1),
            part(f"room {fmt_int(room.tokens)} tok", rank=2),
            *([part("compaction ready", rank=3)] if state.compaction.startswith("ready") else [])])

    @staticmethod
    def _turn_text(stats: TurnStats) -> str:
        lines = [
            source_badge(stats.cache_source),
            f"first token  {fmt_seconds(stats.first_token_s)}",
            f"prefill      {fmt_tps(stats.prefill_tps)}",
            f"decode       {fmt_tps(stats.decode_tps)}",
            f"reused {fmt_int(stats.reused_tokens)} · prefilled {fmt_int(stats.prefilled_tokens)}",
        ]
        if stats.typed_prefill_tokens:
            lines.append(f"typed ahead {fmt_int(stats.typed_prefill_tokens)} · "
                         f"{fmt_seconds(stats.typed_prefill_s)}")
        if stats.reasoning_tokens:
            lines.append(f"thinking {fmt_int(stats.reasoning_tokens)} · answer "
                         f"{fmt_int(stats.answer_tokens)} tokens")
        if stats.spec_mode != "off":
            lines.append(f"{stats.spec_mode} "
                         + speculation_text(stats.acceptance, stats.tokens_per_pass))
        if stats.miss_words:
            lines.append(_miss_markup(stats))
        return "\n".join(lines)

    @staticmethod
    def _compact_turn_text(stats: TurnStats) -> list[Part]:
        # What does not fit the width is left out, the least telling first.
        miss = (part(_miss_markup(stats), "new conversation" if stats.new_conversation
                     else "[$warning]cache miss (/stats)[/]", rank=2)
                if stats.miss_words else None)
        return [p for p in (
            part(source_badge(stats.cache_source)),
            part(f"ttft {fmt_seconds(stats.first_token_s)}"),
            part(f"decode {fmt_tps(stats.decode_tps)}", rank=1),
            part(f"reused {fmt_int(stats.reused_tokens)} / new "
                 f"{fmt_int(stats.prefilled_tokens)}", rank=3),
            miss,
            part(f"prefill {fmt_tps(stats.prefill_tps)}", rank=4)) if p is not None]
