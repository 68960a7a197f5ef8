"""Small host apps that mount one widget each, and fixed sample data."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.message import Message
from textual.widget import Widget

from mlxchat.commands import Completion
from mlxchat.engine.events import EngineState
from mlxchat.tui import HORIZONTAL_BREAKPOINTS, STYLESHEET
from mlxchat.tui.widgets import PromptInput
from mlxchat.turn_stats import TurnStats

GB = 1_000_000_000

SAMPLE_STATS = TurnStats(
    ttft_s=0.1234, prefill_tps=1234.56, decode_tps=35.25, prompt_tokens=1056,
    generated_tokens=128, context_used=1184, context_window=8192, kv_bytes=24_248_320,
    kv_bits=None, weights_bytes=77_500_000, peak_memory_bytes=120_300_000,
    cache_source="snapshot", reused_tokens=1024, prefilled_tokens=32,
    miss_reason="system prompt changed", total_s=3.9,
)

SAMPLE_STATE = EngineState(
    model_name="smollm2-135m", cached_tokens=1184, context_window=8192,
    kv_bytes=24_248_320, kv_bits=None, kv_dtype="fp16", weights_bytes=77_500_000,
    bits_per_weight=4.52,
    peak_memory_bytes=120_300_000, cache_source="snapshot", scales_dtype="float32",
)


class HostApp(App[None]):
    """Mounts what ``factory`` builds with the real stylesheet and breakpoints;
    records the messages widgets post."""

    CSS_PATH = str(STYLESHEET)
    HORIZONTAL_BREAKPOINTS = HORIZONTAL_BREAKPOINTS

    def __init__(self, factory: Callable[[], Widget | list[Widget]]) -> None:
        super().__init__()
        self.factory = factory
        self.received: list[Message] = []

    def compose(self) -> ComposeResult:
        made = self.factory()
        yield from made if isinstance(made, list) else [made]

    def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        self.received.append(message)

    def on_prompt_input_edit_last(self, message: PromptInput.EditLast) -> None:
        self.received.append(message)


COMMANDS = [
    ("/help", "Show commands and keys"),
    ("/model", "Switch model"),
    ("/models", "List models"),
    ("/new", "Start a new session"),
    ("/sessions", "Browse saved sessions"),
    ("/set", "Change a generation setting"),
]
MODEL_ARGS = ["qwen3-4b", "smollm2-135m", "llama-3.2-1b"]


def fake_complete(text: str) -> list[Completion]:
    """Names first; after '/model ' its arguments."""
    if text.startswith("/model "):
        arg = text[len("/model "):]
        return [Completion(f"/model {m}", m, "") for m in MODEL_ARGS if m.startswith(arg)]
    return [Completion(name + " ", name, help) for name, help in COMMANDS
            if name.startswith(text.rstrip())]


class ScreenHost(App[None]):
    """Pushes one screen on mount and records what it dismisses with."""

    CSS_PATH = str(STYLESHEET)
    HORIZONTAL_BREAKPOINTS = HORIZONTAL_BREAKPOINTS
    NO_RESULT = object()

    def __init__(self, make_screen: Callable[[], object]) -> None:
        super().__init__()
        self.make_screen = make_screen
        self.result: object = self.NO_RESULT

    def on_mount(self) -> None:
        self.push_screen(self.make_screen(), self._record)

    def _record(self, result: object) -> None:
        self.result = result


DEMO_MESSAGES = [
    ("user", "How do I read a file line by line in Python?"),
    ("assistant", ("Open it in a `with` block and iterate:\n\n```python\n"
                   "with open(\"notes.txt\") as f:\n"
                   "    for line in f:\n        print(line.rstrip())\n```\n\n"
                   "The file closes when the block ends, even on an error.")),
    ("user", "And skip blank lines?"),
]
