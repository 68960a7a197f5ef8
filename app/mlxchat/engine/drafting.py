"""Speculation, the engine side: the draft model, the checks that refuse what
would corrupt a reply, and the token stream a turn decodes from (plain, draft
model or prompt lookup), all yielding (token, from_draft)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.chat import GenerationSettings
from mlxchat.engine.events import EngineError
from mlxchat.engine.live import LiveCache
from mlxchat.engine.lookup import lookup_stream
from mlxchat.engine.speculative import (Draft, Speculation, Stream, draft_stream, plain_stream,
                                        trim_problem, vocab_problem)
from mlxchat.models.info import LoadedModel, ModelInfo


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


class Drafting:
    """Mixed into ChatEngine (which provides ``_call``, ``_loaded``, ``_live``,
    ``_cancel`` and ``_refresh_state``)."""

    _draft: Draft | None = None
    _loaded: LoadedModel
    _live: LiveCache
    _call: Callable[[Callable[[], Any]], Any]

    def set_draft(self, loaded: LoadedModel | None, spec: str = "") -> None:
        """Make ``loaded`` the draft model (None unloads it). Raises EngineError
        (and keeps the current draft) when it cannot draft for this model."""
        def job() -> None:
            if loaded is not None:
                problem = pair_problem(self._loaded, loaded)
                if problem:
                    raise EngineError(f"cannot use {spec or loaded.info.name} as a draft: "
                                      f"{problem}")
            self._draft = None if loaded is None else Draft(loaded, spec or loaded.info.name)
            mx.clear_cache()
            self._refresh_state()  # type: ignore[attr-defined]
        self._call(job)

    @property
    def draft_info(self) -> ModelInfo | None:
        draft = self._draft
        return None if draft is None else draft.loaded.info

    @property
    def draft_spec(self) -> str | None:
        """The spec the draft model was loaded from (None: no draft)."""
        draft = self._draft
        return None if draft is None else draft.spec

    @property
    def draft_cached_tokens(self) -> list[int]:
        """The token ids the draft model's cache holds (empty without a draft)."""
        draft = self._draft
        return [] if draft is None else list(draft.live.tokens)

    def speculation_problem(self, mode: str) -> str | None:
        """Why the loaded model cannot speculate in ``mode`` now, or None."""
        if mode == "off":
            return None
        problem = self._call(lambda: trim_problem(self._loaded, "the model"))
        if problem:
            return problem
        if mode == "draft" and self._draft is None:
            return "no draft model is loaded (/set draft SPEC loads one)"
        return None

    def _keep_fitting_draft(self) -> None:
        """After a model switch: drop a draft that cannot draft for the new model."""
        if self._draft is not None and pair_problem(self._loaded, self._draft.loaded):
            self._draft = None

    # -- engine thread -------------------------------------------------------------
    def _follow_draft(self, tokens: Sequence[int], settings: GenerationSettings
                      ) -> tuple[int, bool]:
        """Bring the draft's cache to ``tokens`` (the prompt less its fed tail)."""
        if settings.speculative != "draft" or self._draft is None:
            return 0, False
        cancel = self._cancel  # type: ignore[attr-defined]
        return self._draft.follow(tokens, kv_bits=settings.kv_bits, cancelled=cancel.is_set)

    def _token_stream(self, tail: Sequence[int], settings: GenerationSettings, *,
                      budget: int, sampler: Any, processors: Any,
                      prompt_tokens: Sequence[int], count: Speculation) -> Stream:
        model, live, k = self._loaded.model, self._live, settings.draft_tokens
        count.mode = settings.speculative
        if count.mode == "draft" and self._draft is not None:
            return draft_stream(model, live, self._draft, tail, k=k, budget=budget,
                                sampler=sampler, processors=processors, count=count)
        if count.mode == "lookup":
            return lookup_stream(model, live, tail, history=prompt_tokens, k=k, budget=budget,
                                 sampler=sampler, processors=processors, count=count)
        count.mode = "off"
        return plain_stream(model, live, tail, budget=budget, sampler=sampler,
                            processors=processors, count=count)

    @property
    def _draft_kv_bytes(self) -> int:
        draft = self._draft
        return 0 if draft is None else draft.live.nbytes
