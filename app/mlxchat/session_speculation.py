"""Speculative decoding, the conversation side: the draft model is loaded and
unloaded here (through the conversation's model loader), the mode is checked
against the loaded model before it is stored, and a model switch or a reopened
session that cannot speculate turns it off with a message, never silently."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

from mlxchat.chat import GenerationSettings, Session
from mlxchat.errors import MlxchatError, UserError
from mlxchat.models import catalog

if TYPE_CHECKING:
    from mlxchat.engine.interface import Engine
    from mlxchat.models.info import LoadedModel


class SpeculationError(UserError):
    """Speculation cannot be turned on as asked; settings are unchanged."""


class Speculating:
    """Mixed into ``Conversation``."""

    engine: Engine
    session: Session
    model_spec: str
    _load_model: Callable[[str], LoadedModel] | None
    _call_settings: GenerationSettings | None

    if TYPE_CHECKING:  # defined by Conversation
        @property
        def generation(self) -> GenerationSettings: ...

        def update_generation(self, settings: GenerationSettings) -> None: ...

    def _change_generation(self, **changes: Any) -> None:
        """Into this call's settings when ``use_settings`` set them, else the session's."""
        if self._call_settings is not None:
            self._call_settings = dataclasses.replace(self._call_settings, **changes)
        else:
            self.update_generation(dataclasses.replace(self.session.settings, **changes))

    def draft_name(self) -> str | None:
        """The loaded draft model's name (None: none loaded)."""
        info = self.engine.draft_info
        return None if info is None else info.name

    def paired_draft_hint(self) -> str | None:
        """The catalog's draft for the loaded model, if it names one."""
        return catalog.draft_for(self.model_spec)

    def paired_draft(self) -> str:
        """The catalog's draft for the loaded model (``/set draft auto``)."""
        spec = self.paired_draft_hint()
        if spec is None:
            raise SpeculationError(f"the catalog pairs no draft model with {self.model_spec}; "
                                   "name one: /set draft SPEC (same tokenizer, smaller)")
        return spec

    def set_draft(self, spec: str | None) -> str | None:
        """Load ``spec`` as the draft model and speculate with it (None unloads
        it and turns draft speculation off). Returns the draft's name. Refused
        with the reason (vocabularies, caches) and nothing changed."""
        if spec is None:
            self.engine.set_draft(None)
            mode = "off" if self.generation.speculative == "draft" else self.generation.speculative
            self._change_generation(draft=None, speculative=mode)
            return None
        if self._load_model is None:
            raise SpeculationError("Loading a draft model is not available here.")
        problem = self.engine.speculation_problem("lookup")  # the model's own caches
        if problem:
            raise SpeculationError(f"speculative decoding is not possible: {problem}")
        loaded = self._load_model(spec)
        self.engine.set_draft(loaded, spec)
        self._change_generation(draft=spec, speculative="draft")
        return loaded.info.name

    def set_speculative(self, mode: str) -> None:
        """Turn speculation ``off``, to ``lookup``, or to ``draft`` (loading the
        session's draft when it is not loaded yet); refused with the reason."""
        if mode == "draft" and self.engine.draft_spec is None:
            if not self.generation.draft:
                raise SpeculationError("no draft model chosen: /set draft SPEC (or /set draft "
                                       "auto for the catalog's pairing) loads one")
            self.set_draft(self.generation.draft)
            return
        problem = self.engine.speculation_problem(mode)
        if problem:
            raise SpeculationError(f"speculative {mode} is not possible: {problem}")
        self._change_generation(speculative=mode)

    def resume_speculation(self) -> str | None:
        """After opening a session or switching models: load the stored draft,
        or turn speculation off when it cannot run here; the notice, if any."""
        mode, wanted = self.generation.speculative, self.generation.draft
        if mode != "draft" and self.engine.draft_spec not in (None, wanted):
            self.engine.set_draft(None)  # another session's draft: free its memory
        if mode == "off":
            return None
        try:
            if mode == "draft" and self.engine.draft_spec != wanted:
                if wanted:
                    self.set_draft(wanted)
                else:
                    self.set_draft(None)  # draft mode without a draft: off
                return None
            problem = self.engine.speculation_problem(mode)
            if problem:
                raise SpeculationError(problem)
        except MlxchatError as exc:
            self._change_generation(speculative="off")
            return f"Speculative decoding is off: {exc}"
        return None
