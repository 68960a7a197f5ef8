"""What a conversation needs from an engine: all ``Conversation`` and its parts
depend on. ``ChatEngine`` (core.py) meets it, on one process or, given
``SplitRanks``, for a model split across ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Protocol, Sequence

from mlxchat.chat import Message
from mlxchat.engine.disk.prefix import PrefixSaved
from mlxchat.engine.disk.segments import SegmentInfo, SegmentRef
from mlxchat.engine.events import CacheLoad, EngineState, Event
from mlxchat.engine.prompt.builder import PromptBuilder
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.engine.speculative.auto import VerifyCost
from mlxchat.engine.turn.constrained import CompiledFormat
from mlxchat.engine.turn.early_images import EarlyImages
from mlxchat.engine.turn.prefill_cost import PrefillChunk
from mlxchat.engine.turn.prepared import PreparedCache
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel, ModelInfo


class Engine(Protocol):
    prompts: PromptBuilder
    """Renders, the ledger's deltas and the window, for the model held now."""
    images: EarlyImages
    """The vision tower run for images as they are attached (``hold``)."""
    prepared: PreparedCache
    """A second cache filled in idle time (a compacted conversation, its summary)."""

    @property
    def segments_per_rank(self) -> bool:
        """A split model: each rank keeps its own shard of every segment."""

    @property
    def loaded(self) -> LoadedModel: ...

    @property
    def info(self) -> ModelInfo: ...

    def state(self) -> EngineState: ...

    def turn(self, conversation: Sequence[Message] | FittedPrompt,
             settings: GenerationSettings, *,
             output: CompiledFormat | None = None) -> Iterator[Event]: ...




    def prefill(self, tokens: Sequence[int], settings: GenerationSettings, *, floor: int = 0,
                current: Callable[[], bool] = ...) -> int: ...

    def prefill_chunks(self, kv_bits: int | None) -> list[PrefillChunk]: ...

    def supersede_typing(self) -> None: ...

    def warm_up(self) -> None: ...



    def kv_bytes_per_token(self, kv_bits: int | None = None) -> int: ...

    def cancel(self) -> None: ...




    def load_snapshot(self, path: Path, *, expected_checksum: str | None = None,
                      conversation: Sequence[Message] = ()) -> CacheLoad: ...

    def save_segment(self, path: Path, start: int, end: int | None = None) -> SegmentInfo: ...

    def load_segments(self, refs: Sequence[SegmentRef], *,
                      conversation: Sequence[Message] = ()) -> CacheLoad: ...

    def mark_prefix(self, tokens: Sequence[int] | None, path: Path | None = None) -> None: ...

    def take_prefix(self) -> PrefixSaved | None: ...

    def needs_restore(self, tokens: Sequence[int]) -> bool: ...

    @property
    def cached_tokens(self) -> list[int]: ...

    def drop_cache(self, reason: str = "cache dropped") -> None: ...

    def switch_model(self, loaded: LoadedModel) -> None: ...

    def set_draft(self, loaded: LoadedModel | None, spec: str = "") -> None: ...

    @property
    def draft_info(self) -> ModelInfo | None: ...

    @property
    def draft_spec(self) -> str | None: ...

    def speculation_problem(self, mode: str) -> str | None: ...

    def verify_cost(self) -> VerifyCost | None: ...

    def close(self) -> None: ...
