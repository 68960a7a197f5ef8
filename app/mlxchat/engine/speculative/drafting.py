"""Speculation, the engine side: the draft model, the checks that refuse what
would corrupt a reply, and the token stream a turn decodes from (plain, draft
model or prompt lookup), all yielding (token, from_draft)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from mlx_lm.models.cache import make_prompt_cache

from mlxchat.engine.events import EngineError, TurnDone
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.results import SpeculationFigures
from mlxchat.engine.speculative import auto
from mlxchat.engine.speculative.lookup import lookup_stream
from mlxchat.engine.speculative.streams import (
    Draft,
    Stream,
    draft_stream,
    plain_stream,
    trim_problem,
    vocab_problem,
)
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel, ModelInfo


def _layout_problem(target: LoadedModel) -> str | None:
    """mlx-lm's speculative loop splits one cache list at ``len(model.layers)``."""
    entries = len(make_prompt_cache(target.model))
    layers = len(getattr(target.model, "layers", ()))
    if entries == layers:
        return None
    return (f"the model {target.info.name} keeps {entries} cache entries for {layers} layers, "
            "which mlx-lm's speculative loop cannot tell from the draft's")


def pair_problem(target: LoadedModel, draft: LoadedModel) -> str | None:
    """Why ``draft`` cannot draft for ``target``, or None."""
    return (trim_problem(target, "the model") or trim_problem(draft, "the draft")
            or _layout_problem(target) or vocab_problem(target, draft))


MeasureVerify = Callable[..., auto.VerifyCost]
"""Times a verifying pass: ``(model, layers, *, proposed, step_s)``, as ``auto.measure``."""

MeasureJob = Callable[[LoadedModel, LiveCache], None]
"""A measurement queued after a reply, run on the engine thread with the model
and live cache as they are then."""


class Drafting:
    """The draft model and what verifying proposals costs: the engine's
    speculation. Changed on the engine thread; the draft and the cost are read
    from any thread (each is replaced whole, never changed in place)."""

    def __init__(self, *, measure: MeasureVerify = auto.measure):
        self.draft: Draft | None = None
        self.cost: auto.VerifyCost | None = None
        """What verifying proposals costs on this device, measured for the
        loaded model (``speculative=auto``; None before)."""
        self._measure = measure

    def set(self, target: LoadedModel, loaded: LoadedModel | None, spec: str = "") -> None:
        """Make ``loaded`` the draft model (None unloads it). Raises EngineError
        (and keeps the current draft) when it cannot draft for ``target``."""
        if loaded is not None:
            problem = pair_problem(target, loaded)
            if problem:
                raise EngineError(f"cannot use {spec or loaded.info.name} as a draft: {problem}")
        self.draft = None if loaded is None else Draft(loaded, spec or loaded.info.name)

    @property
    def info(self) -> ModelInfo | None:
        draft = self.draft
        return None if draft is None else draft.loaded.info

    @property
    def spec(self) -> str | None:
        """The spec the draft model was loaded from (None: no draft)."""
        draft = self.draft
        return None if draft is None else draft.spec

    @property
    def cached_tokens(self) -> list[int]:
        """The token ids the draft model's cache holds (empty without a draft)."""
        draft = self.draft
        return [] if draft is None else list(draft.live.tokens)

    @property
    def kv_bytes(self) -> int:
        draft = self.draft
        return 0 if draft is None else draft.live.nbytes

    def problem(self, mode: str, model_problem: Callable[[], str | None]) -> str | None:
        """Why the model cannot speculate in ``mode`` now, or None (auto never
        refuses: it decodes plainly where lookup cannot run). ``model_problem``
        is asked only when the mode needs a trimmable model."""
        if mode in ("off", "auto"):
            return None
        problem = model_problem()
        if problem:
            return problem
        if mode == "draft" and self.draft is None:
            return "no draft model is loaded (/set draft SPEC loads one)"
        return None

    def model_changed(self, target: LoadedModel) -> None:
        """A new model: its cost is measured again, and a draft that cannot
        draft for it is dropped."""
        self.cost = None
        if self.draft is not None and pair_problem(target, self.draft.loaded):
            self.draft = None

    # -- engine thread -------------------------------------------------------------
    def _auto_mode(self, target: LoadedModel, settings: GenerationSettings) -> str:
        """What ``speculative=auto`` decodes with now: 'lookup' or 'off'."""
        cost = self.cost
        if (settings.seed is not None or cost is None or not cost.pays
                or cost.proposed != settings.draft_tokens
                or trim_problem(target, "the model")):
            return "off"
        return "lookup"

    def measurement(self, target: LoadedModel, settings: GenerationSettings, done: TurnDone,
                    tokens: Sequence[int]) -> MeasureJob | None:
        """After a reply under auto (``tokens``: the cache's, its prompt first): the
        job to run after this turn: a verifying pass timed against a plain
        reply's decode step (once per model and k), then auto's choice updated
        by this reply (``auto.LookupChoice``); None when there is nothing to learn."""
        k, stats = settings.draft_tokens, done.stats
        if (settings.speculative != "auto" or settings.seed is not None
                or stats.generated_tokens - 1 < auto.MIN_STEPS or not stats.decode_tps):
            return None
        history, reply = list(tokens[:stats.prompt_tokens]), list(done.token_ids)

        def job(loaded: LoadedModel, live: LiveCache) -> None:
            if loaded is not target or trim_problem(target, "the model"):
                return
            if (self.cost is None or self.cost.proposed != k) and stats.spec_mode == "off" \
                    and live.tokens:
                self.cost = self._measure(target.model, live.layers, proposed=k,
                                          step_s=1.0 / stats.decode_tps)
            if self.cost is not None and self.cost.proposed == k:
                self.cost = self.cost.after(mode=stats.spec_mode, decode_tps=stats.decode_tps,
                                            history=history, reply=reply)
        return job

    def follow(self, tokens: Sequence[int], settings: GenerationSettings,
               cancelled: Callable[[], bool]) -> tuple[int, bool]:
        """Bring the draft's cache to ``tokens`` (the prompt less its fed tail)."""
        if settings.speculative != "draft" or self.draft is None:
            return 0, False
        return self.draft.follow(tokens, kv_bits=settings.kv_bits, cancelled=cancelled)

    def stream(self, target: LoadedModel, live: LiveCache, tail: Sequence[int],
               settings: GenerationSettings, *, budget: int, sampler: Any, processors: Any,
               prompt_tokens: Sequence[int], count: SpeculationFigures) -> Stream:
        """The tokens a reply decodes, by the settings' mode of speculation."""
        model, k = target.model, settings.draft_tokens
        count.mode = (self._auto_mode(target, settings) if settings.speculative == "auto"
                      else settings.speculative)
        if count.mode == "draft" and self.draft is not None:
            return draft_stream(model, live, self.draft, tail, k=k, budget=budget,
                                sampler=sampler, processors=processors, count=count)
        if count.mode == "lookup":
            return lookup_stream(model, live, tail, history=prompt_tokens, k=k, budget=budget,
                                 sampler=sampler, processors=processors, count=count)
        count.mode = "off"
        return plain_stream(model, live, tail, budget=budget, sampler=sampler,
                            processors=processors, count=count)
