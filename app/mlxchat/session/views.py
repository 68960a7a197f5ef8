"""Read-only views of the engine a conversation gives commands and the UI:
figures, token counts and how a reply is shown. Nothing here changes state."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from mlxchat.chat import Message
from mlxchat.engine.events import EngineState
from mlxchat.engine.interface import Engine
from mlxchat.engine.prompt.delta import TemplateOptions
from mlxchat.engine.turn.prefill_cost import PrefillChunk, PrefillCost, fit
from mlxchat.models import LoadedModel, ModelInfo, tools
from mlxchat.session.compactor import CompactStatus
from mlxchat.session.current import OpenSession
from mlxchat.session.pins import PinnedDocs
from mlxchat.turn_stats import TurnStats


@dataclass
class ContextCosts:
    """What fills the window, message by message (``/context``)."""

    messages: list[Message]
    """The branch with the system part first (when the session has one)."""
    counts: list[int]
    """Tokens of each message, in order."""
    total: int
    """Tokens of the next prompt before the new message: from the ledger, the
    sum of the counts; rendered, the counts plus the generation prompt."""
    from_ledger: bool
    opening: int = 0
    """Tokens the template puts before a first message that is not a system
    one (begin-of-text, its default system prompt): taken out of ``counts[0]``."""
    opening_text: str = ""
    """Their text, control tokens left out ("" when they are control tokens only)."""


@dataclass(frozen=True)
class PrefillEstimate:
    """How long tokens added at the end of the conversation will take to prefill."""

    seconds: float
    start: int
    """Tokens the window holds before them."""
    cost: PrefillCost
    measured_chunks: bool
    """From the prefill chunks measured on this model (False: the branch's
    stored turns, each as one chunk)."""
    spread_over_tokens: float | None = None
    """The same forecast with each pass's own cost spread over its chunk's
    tokens, when that is over a quarter more: the top of a range (short
    chunks say little of a long prefill; None: one figure holds)."""


def decode_step(turns: list[TurnStats], recent: int = 5) -> float | None:
    """Seconds of a decode step (one pass feeding one token), the median of the
    last ``recent`` turns that decoded plainly; None when none did."""
    steps = sorted(1 / s.decode_tps for s in turns[-recent:]
                   if s.decode_tps and s.spec_mode == "off")
    return steps[len(steps) // 2] if steps else None


class EngineViews:
    """What commands and the UI read of the engine, for the open session."""

    def __init__(self, open_session: OpenSession, engine: Engine, pins: PinnedDocs, *,
                 last_stats: Callable[[], TurnStats | None],
                 compaction: Callable[[], CompactStatus]):
        self._open = open_session
        self._engine = engine
        self._pins = pins
        self._last_stats = last_stats
        """The stats of the turn this conversation ran last (None: none yet)."""
        self._compaction = compaction
        """Where the branch's compaction stands (``Compactor.status``)."""

    @property
    def model_info(self) -> ModelInfo:
        return self._engine.info

    @property
    def loaded(self) -> LoadedModel:
        """The model the engine holds now (its weights shared by a server beside it)."""
        return self._engine.loaded

    @property
    def split_across_ranks(self) -> bool:
        """The model is split over several MLX ranks (each keeps its own KV shard)."""
        return self._engine.segments_per_rank

    def decode_in(self, batch: object | None) -> None:
        """This engine's replies decode in ``batch`` (an ``engine.batch``
        ``BatchDecoder``: the API's beside the chat) with others', or alone (None);
        an engine that cannot batch always decodes alone."""
        getattr(self._engine, "decode_in", lambda batch: None)(batch)

    def state(self) -> EngineState:
        compaction = self._compaction()
        state = replace(self._engine.state(), pinned_tokens=self._pins.pinned_in_cache(),
                        compact_at=compaction.threshold, compaction=compaction.words())
        bits = self._open.generation.kv_bits
        if bits and not state.cached_tokens and state.kv_bits != bits:
            # An empty cache is quantized to the session's width as the first
            # turn starts: name that width now rather than the float type.
            state = replace(state, kv_bits=bits, kv_dtype=f"{bits}-bit")
        return state

    def branch_stats(self) -> TurnStats | None:
        """The live turn's stats, else those stored with the branch's last reply."""
        live = self._last_stats()
        if live is not None:
            return live
        return next((m.stats for m in reversed(self._open.messages)
                     if m.role == "assistant" and m.stats is not None), None)

    @property
    def context_window(self) -> int:
        """The window turns get: the model's, or the session's cap below it."""
        return self._engine.prompts.window(self._open.generation)

    def count_tokens(self, messages: list[Message]) -> int:
        return self._engine.prompts.count_tokens(messages)

    def display_text(self, content: str) -> str:
        """A reply's answer as Markdown to show: tool-call markup (in the
        model's own format, read with mlx-lm's parser for it) becomes a block
        with the tool's name and arguments."""
        return tools.as_markdown(tools.split_tool_calls(self._engine.loaded.tokenizer, content))

    def reply_stream(self) -> tools.CallStream:
        """Turns a streaming reply's text into the Markdown to append: a tool
        call's block as soon as the call is complete, its markup never shown."""
        return tools.CallStream(tools.call_markup(self._engine.loaded.tokenizer))

    def kv_bytes_per_token(self) -> int:
        """What one more token adds to the KV cache at this session's kv_bits, measured."""
        return self._engine.kv_bytes_per_token(self._open.generation.kv_bits)

    def message_tokens(self, messages: list[Message]) -> list[int]:
        return self._engine.prompts.message_tokens(messages)

    def context_costs(self) -> ContextCosts:
        """What each message of the branch (system part first) costs in the
        window: read off the token ledger (no rendering) when the branch has
        one, else rendered prefix by prefix."""
        messages = self._open.with_system(self._open.messages)
        ledger = self._open.ledger(self._engine)
        compacted = ledger.compacted_costs(self._open.messages, self._pins.system_tokens())
        if compacted is not None:  # the summary on its own row, then what was kept
            rows, counts = compacted
            return ContextCosts(rows, counts, sum(counts), from_ledger=True)
        costs = ledger.costs(self._open.messages, self._pins.system_tokens())
        if costs is not None:
            return self._opening_apart(ContextCosts(messages, costs, sum(costs),
                                                    from_ledger=True), ledger.options)
        if not messages:
            return ContextCosts([], [], 0, from_ledger=False)
        return self._opening_apart(ContextCosts(
            messages, self._engine.prompts.message_tokens(messages),
            self._engine.prompts.count_tokens(messages), from_ledger=False), TemplateOptions())

    def _opening_apart(self, costs: ContextCosts, options: TemplateOptions) -> ContextCosts:
        """The template's opening counted on its own row, not as the first message's."""
        if not costs.messages or costs.messages[0].role == "system":
            return costs
        opening = self._engine.prompts.opening(options=options)
        first = costs.messages[0].token_ids
        if not opening or len(opening) >= costs.counts[0] or (
                costs.from_ledger and list(first or ())[:len(opening)] != opening):
            return costs
        text = self._engine.loaded.tokenizer.decode(opening, skip_special_tokens=True)
        return replace(costs, counts=[costs.counts[0] - len(opening), *costs.counts[1:]],
                       opening=len(opening), opening_text=text.strip())

    def prefill_estimate(self, tokens: int, *, after: int = 0) -> PrefillEstimate | None:
        """The time ``tokens`` more at the end of the conversation (after
        ``after`` pending ones) will take to prefill, deeper in the window than
        the turns measured so far: from this model's measured chunks, else the
        branch's stored turns; None before anything was measured."""
        start = self.context_window - self.window_left() + after
        turns = self._turns()
        step = decode_step(turns)  # a pass's own cost, which short chunks hold most of
        measured = self._engine.prefill_chunks(self._open.generation.kv_bits)
        chunks = measured or [
            PrefillChunk(s.prefilled_tokens, s.reused_tokens, s.prefilled_tokens / s.prefill_tps)
            for s in turns if s.prefill_tps]
        cost = fit(chunks, step=step)
        if cost is None:
            return None
        seconds = cost.seconds(tokens, start)
        spread = fit(chunks).seconds(tokens, start) if cost.per_pass else seconds
        return PrefillEstimate(seconds, start, cost, measured_chunks=bool(measured),
                               spread_over_tokens=spread if spread > 1.25 * seconds else None)

    def _turns(self) -> list[TurnStats]:
        """The figures of the branch's turns on the model held now, the last one too."""
        name = self._engine.info.name
        found = [m.stats for m in self._open.messages if m.role == "assistant" and m.stats]
        live = self._last_stats()
        found += [live] if live is not None and live not in found else []
        return [s for s in found if s.model in ("", name)]

    def ledger_note(self) -> str | None:
        """Where the cached token ledger differs from today's template rendering."""
        return self._open.ledger(self._engine).note(self._open.messages)

    def window_left(self) -> int:
        """Tokens still free in the context window for the next message: read
        off the token ledger when the branch has one (no rendering of the
        whole conversation, which /attach, /pin and every retrieving message
        ask for), else rendered."""
        messages = self._open.messages
        if not messages:
            return self.context_window
        used = self._open.ledger(self._engine).used(messages)
        if used is None:
            used = self._engine.prompts.count_tokens(self._open.with_system(messages))
        return self.context_window - used
