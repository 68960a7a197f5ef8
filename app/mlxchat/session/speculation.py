"""Speculative decoding, the conversation side: the draft model is loaded and
unloaded here (through the conversation's model loader), the mode is checked
against the loaded model before it is stored, and a model switch or a reopened
session that cannot speculate turns it off with a message, never silently."""

from __future__ import annotations

from typing import Callable

from mlxchat.engine.interface import Engine
from mlxchat.engine.speculative.auto import VerifyCost
from mlxchat.errors import MlxchatError, UserError
from mlxchat.models import LoadedModel, catalog
from mlxchat.session.current import OpenSession


class SpeculationError(UserError):
    """Speculation cannot be turned on as asked; settings are unchanged."""


class Speculation:
    """The session's speculative decoding and its draft model."""

    def __init__(self, open_session: OpenSession, engine: Engine, *,
                 model_spec: Callable[[], str],
                 load_model: Callable[[str], LoadedModel] | None):
        self._open = open_session
        self._engine = engine
        self._model_spec = model_spec
        """The loaded model's spec (it changes with /model)."""
        self._load_model = load_model
        self.notice: str | None = None
        """Why speculation was turned off by the last ``resume`` (an open, a model switch)."""

    def verify_cost(self) -> VerifyCost | None:
        """What verifying proposals costs on this device, as ``speculative=auto``
        measured it for the loaded model (None until a reply has run)."""
        return self._engine.verify_cost()

    def draft_name(self) -> str | None:
        """The loaded draft model's name (None: none loaded)."""
        info = self._engine.draft_info
        return None if info is None else info.name

    def paired_draft_hint(self) -> str | None:
        """The catalog's draft for the loaded model, if it names one."""
        return catalog.draft_for(self._model_spec())

    def paired_draft(self) -> str:
        """The catalog's draft for the loaded model (``/set draft auto``)."""
        spec = self.paired_draft_hint()
        if spec is None:
            raise SpeculationError(f"the catalog pairs no draft model with {self._model_spec()}; "
                                   "name one: /set draft SPEC (same tokenizer, smaller)")
        return spec

    def set_draft(self, spec: str | None) -> str | None:
        """Load ``spec`` as the draft model and speculate with it (None unloads
        it and turns draft speculation off). Returns the draft's name. Refused
        with the reason (vocabularies, caches) and nothing changed."""
        if spec is None:
            self._engine.set_draft(None)
            mode = "auto" if self._open.generation.speculative == "draft" else self._open.generation.speculative
            self._open.change_generation(draft=None, speculative=mode)
            return None
        if self._load_model is None:
            raise SpeculationError("Loading a draft model is not available here.")
        problem = self._engine.speculation_problem("lookup")  # the model's own caches
        if problem:
            raise SpeculationError(f"speculative decoding is not possible: {problem}")
        loaded = self._load_model(spec)
        self._engine.set_draft(loaded, spec)
        self._open.change_generation(draft=spec, speculative="draft")
        return loaded.info.name

    def set_speculative(self, mode: str) -> None:
        """Turn speculation ``off``, to ``lookup``, or to ``draft`` (loading the
        session's draft when it is not loaded yet); refused with the reason."""
        if mode == "draft" and self._engine.draft_spec is None:
            if not self._open.generation.draft:
                raise SpeculationError("no draft model chosen: /set draft SPEC (or /set draft "
                                       "auto for the catalog's pairing) loads one")
            self.set_draft(self._open.generation.draft)
            return
        problem = self._engine.speculation_problem(mode)
        if problem:
            raise SpeculationError(f"speculative {mode} is not possible: {problem}")
        self._open.change_generation(speculative=mode)

    def resume(self) -> str | None:
        """After opening a session or switching models: load the stored draft,
        or turn speculation off when it cannot run here; the notice, if any
        (kept as ``notice``)."""
        self.notice = self._resumed()
        return self.notice

    def _resumed(self) -> str | None:
        mode, wanted = self._open.generation.speculative, self._open.generation.draft
        if mode != "draft" and self._engine.draft_spec not in (None, wanted):
            self._engine.set_draft(None)  # another session's draft: free its memory
        if mode == "off":
            return None
        try:
            if mode == "draft" and self._engine.draft_spec != wanted:
                if wanted:
                    self.set_draft(wanted)
                else:
                    self.set_draft(None)  # draft mode without a draft: off
                return None
            problem = self._engine.speculation_problem(mode)
            if problem:
                raise SpeculationError(problem)
        except MlxchatError as exc:
            self._open.change_generation(speculative="off")
            return f"Speculative decoding is off: {exc}"
        return None
