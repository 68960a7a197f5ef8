"""The session a conversation has open: the one place it is assigned, read by
every part of the conversation (turns, cache keeper, pins, typing, speculation).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from mlxchat.chat import Message, Session, model_view
from mlxchat.engine.interface import Engine
from mlxchat.generation import GenerationSettings
from mlxchat.session.ledger import Ledger
from mlxchat.store import SessionStore, StoreError


class OpenSession:
    """The open session and this call's generation settings."""

    def __init__(self, store: SessionStore, session: Session):
        self.store = store
        self.session = session
        self.call_settings: GenerationSettings | None = None
        """Settings for this call's turns only (``use_settings``); never stored."""
        self.call_tools: str | None = None
        """Tool definitions (canonical JSON) the template renders in this call's
        turns (``use_settings``); never stored."""
        self.call_reserve: int | None = None
        """Tokens this call's prompts leave for the reply (``use_settings``;
        None: the settings' ``max_tokens``, at most half the window)."""
        self.session_tools: Callable[[], str | None] = lambda: None
        """The definitions of the session's own tools (``conv.tools`` sets it),
        rendered when this call gives none."""

    @property
    def id(self) -> int | None:
        return self.session.id

    def stored_id(self) -> int:
        if self.session.id is None:
            raise StoreError("This session is not saved.")
        return self.session.id

    @property
    def messages(self) -> list[Message]:
        """The current branch (user and assistant messages), root first."""
        return list(self.session.messages)

    @property
    def generation(self) -> GenerationSettings:
        """This call's settings when ``use_settings`` set them, else the session's."""
        return self.call_settings or self.session.settings

    def use_settings(self, settings: GenerationSettings, *, tools: str | None = None,
                     reserve: int | None = None) -> None:
        settings.check()
        self.call_settings = settings
        self.call_tools = tools
        self.call_reserve = reserve

    def change_generation(self, **changes: Any) -> None:
        """Into this call's settings when ``use_settings`` set them, else the session's."""
        if self.call_settings is not None:
            self.call_settings = dataclasses.replace(self.call_settings, **changes)
        else:
            self.update_generation(dataclasses.replace(self.session.settings, **changes))

    def update_generation(self, settings: GenerationSettings) -> None:
        self.session = self.store.update_session_settings(self.session.id, settings)

    def with_system(self, messages: list[Message]) -> list[Message]:
        """``messages`` as the model sees them (a compaction's summary in place
        of what it stands for: ``chat.model_view``) after the session's system
        part (prompt and pinned documents)."""
        system = self.session.context_system
        return ([Message("system", system)] if system else []) + model_view(messages)

    def engine_messages(self, extra: list[Message] | None = None) -> list[Message]:
        """The branch (and ``extra`` after it) as the engine renders it, system part first."""
        return self.with_system(self.messages + (extra or []))

    def ledger(self, engine: Engine) -> Ledger:
        tools = self.call_tools if self.call_tools is not None else self.session_tools()
        return Ledger(engine, self.session, self.generation, tools=tools,
                      reserve=self.call_reserve)

    def reload(self) -> Session:
        self.session = self.store.get_session(self.session.id)
        return self.session

    def switch_to(self, session: Session) -> None:
        """Another session is open now: this call's settings end with the old one."""
        self.session = session
        self.call_settings = None
        self.call_tools = None
        self.call_reserve = None
