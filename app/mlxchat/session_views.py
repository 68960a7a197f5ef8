"""Read-only views of the engine a conversation gives commands and the UI:
figures, token counts and how a reply is shown. Nothing here changes state."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from mlxchat.chat import GenerationSettings, Message, TurnStats
from mlxchat.engine import EngineState
from mlxchat.models.info import ModelInfo

if TYPE_CHECKING:
    from mlxchat.engine.interface import Engine
    from mlxchat.ledger import Ledger


class EngineViews:
    """Mixed into ``Conversation``."""

    engine: Engine
    last_stats: TurnStats | None

    if TYPE_CHECKING:  # defined by Conversation
        @property
        def messages(self) -> list[Message]: ...

        @property
        def generation(self) -> GenerationSettings: ...

        def engine_messages(self, extra: list[Message] | None = None) -> list[Message]: ...

        def _ledger(self) -> Ledger: ...

        def pinned_in_cache(self) -> int: ...

    @property
    def model_info(self) -> ModelInfo:
        return self.engine.info

    def state(self) -> EngineState:
        return replace(self.engine.state(), pinned_tokens=self.pinned_in_cache())

    def branch_stats(self) -> TurnStats | None:
        """The live turn's stats, else those stored with the branch's last reply."""
        if self.last_stats is not None:
            return self.last_stats
        return next((m.stats for m in reversed(self.messages)
                     if m.role == "assistant" and m.stats is not None), None)

    @property
    def context_window(self) -> int:
        """The window turns get: the model's, or the session's cap below it."""
        return self.engine.window(self.generation)

    def count_tokens(self, messages: list[Message]) -> int:
        return self.engine.count_tokens(messages)

    def display_text(self, content: str) -> str:
        """A reply's answer as Markdown to show: tool-call markup (in the
        model's own format, read with mlx-lm's parser for it) becomes a block
        with the tool's name and arguments."""
        from mlxchat.models import tools

        return tools.as_markdown(tools.split_tool_calls(self.engine.loaded.tokenizer, content))

    def kv_bytes_per_token(self) -> int:
        """What one more token adds to the KV cache at this session's kv_bits, measured."""
        return self.engine.kv_bytes_per_token(self.generation.kv_bits)

    def message_tokens(self, messages: list[Message]) -> list[int]:
        return self.engine.message_tokens(messages)

    def ledger_note(self) -> str | None:
        """Where the cached token ledger differs from today's template rendering."""
        return self._ledger().note(self.messages)

    def window_left(self) -> int:
        """Tokens still free in the context window for the next message."""
        window = self.context_window
        used = self.engine.count_tokens(self.engine_messages()) if self.messages else 0
        return window - used
