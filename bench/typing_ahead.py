"""TTFT of a ~60-token message typed at 5 characters/s, with prefill while
typing and without, after the same warm history: the ``typing_ttft_ratio``.

The typist is simulated in real time in both runs, so both send after the
same seconds of typing: an engine left idle that long answers its first pass
slower (on the 2-core CI machine a one-token pass took 8 ms warm, 80 ms after
3 s idle and 136 ms after 6 s), and a baseline sent at once would be spared
that. Typing prefill follows the app's policy (``tui.typing_prefill``: the text
as it is ``DEBOUNCE_S`` after a keystroke, once per finished word, a job the
send supersedes). TTFT is wall time from Enter to the first streamed text, so
a prefill chunk the send waits for counts.
"""

from __future__ import annotations

import shutil
import threading
import time

from common import greedy_conversation, wall_ttft

from mlxchat.engine.events import TurnDone
from mlxchat.models import LoadedModel
from mlxchat.session.conversation import Conversation
from mlxchat.session.typing_ahead import settled_text
from mlxchat.tui.typing_timer import DEBOUNCE_S

CHARS_PER_S = 5.0
WORDS = ("could you tell me more about how the rivers shaped the harvests, the trade "
         "routes and the towns along the coast over those centuries").split()


def _message(conv: Conversation, lead: str, target: int) -> str:
    tok = conv.engine.loaded.tokenizer
    text, i = lead, 0
    while len(tok.encode(text)) < target:
        text += " " + WORDS[i % len(WORDS)]
        i += 1
    return text


def _typed(conv: Conversation, text: str, *, prefill: bool) -> tuple[float, TurnDone]:
    """Type ``text`` in real time, with typing prefill in a worker or without,
    then Enter."""
    shown = [""]
    stop = threading.Event()

    def prefiller() -> None:
        done_for = None
        while not stop.wait(DEBOUNCE_S):
            now = shown[0]
            if prefill and settled_text(now) != done_for:
                done_for = settled_text(now)
                conv.typing.prefill_typed(now)
    worker = threading.Thread(target=prefiller, daemon=True)
    worker.start()
    start = time.perf_counter()
    for i in range(1, len(text) + 1):
        time.sleep(max(0.0, start + i / CHARS_PER_S - time.perf_counter()))
        shown[0] = text[:i]
    stop.set()
    result = wall_ttft(conv, text)
    worker.join()
    return result


def measure(loaded: LoadedModel, *, history_tokens: int = 1000,
            message_tokens: int = 60) -> dict[str, float]:
    conv, folder = greedy_conversation(loaded, max_tokens=4, prefix="mlxchat-bench-typing-")
    filler = "The history of the region is long and varied, shaped by rivers and trade. "
    tok = loaded.tokenizer
    history = filler
    while len(tok.encode(history)) < history_tokens:
        history += filler
    wall_ttft(conv, history)  # the warm history
    plain_text = _message(conv, "Now", message_tokens)
    plain, plain_done = _typed(conv, plain_text, prefill=False)
    conv.turns.undo()
    typed_text = _message(conv, "Please", message_tokens)
    typed, typed_done = _typed(conv, typed_text, prefill=True)
    print(f"typing: a {len(tok.encode(typed_text))}-token message typed at {CHARS_PER_S:g} chars/s; "
          f"ttft without typing prefill {plain:.3f} s "
          f"(prefilled {plain_done.stats.prefilled_tokens}), with {typed:.3f} s (prefilled "
          f"{typed_done.stats.prefilled_tokens}, {typed_done.stats.typed_prefill_tokens} "
          f"while typing in {typed_done.stats.typed_prefill_s:.2f} s)")
    conv.close()
    conv.store.close()
    shutil.rmtree(folder, ignore_errors=True)
    return {"typing_ttft_ratio": typed / plain}
