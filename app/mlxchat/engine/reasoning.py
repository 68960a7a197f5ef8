"""Splitting a reply's tokens into reasoning and answer as they are sampled.

Two markups are known. Think tags (Qwen3, DeepSeek-R1 distills, anything
mlx-lm's tokenizer wrapper reports through ``has_thinking``): text between
``think_start`` and ``think_end`` is reasoning; a reply *starts* in reasoning
when the rendered prompt ends inside an open think block (R1 distills put
``<think>\\n`` in the generation prompt). Harmony channels (gpt-oss): each
message is ``<|channel|>NAME<|message|>TEXT<|end|>``; the ``analysis`` channel
is reasoning, every other channel the answer.

The splitter only labels tokens: markup is not shown, every token is counted
under the part it belongs to, and the ids themselves are left as sampled
(the token ledger keeps them whole).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from mlxchat.models.markup import Markup, cached_markup, markup_of

__all__ = ["ANSWER", "REASONING", "Markup", "PartText", "Splitter", "cached_markup",
           "markup_of", "split_reply", "starts_in_reasoning"]

Part = Literal["reasoning", "answer"]
HEADER_MAX = 64
"""Tokens a harmony header (role, channel, recipient) may take before '<|message|>'."""
REASONING: Part = "reasoning"
ANSWER: Part = "answer"

def _rfind(tokens: Sequence[int], seq: tuple[int, ...]) -> int:
    n = len(seq)
    for i in range(len(tokens) - n, -1, -1):
        if tuple(tokens[i:i + n]) == seq:
            return i
    return -1


def _last(tokens: Sequence[int], token: int) -> int:
    return _rfind(tokens, (token,))


def starts_in_reasoning(markup: Markup, prompt: Sequence[int]) -> bool:
    """The rendered prompt leaves a think block open (its last think_start
    comes after its last think_end)."""
    if markup.kind != "think":
        return False
    opened = _rfind(prompt, markup.start)
    return opened >= 0 and opened > _rfind(prompt, markup.end)


@dataclass
class Splitter:
    """Labels one reply's tokens in order; ``feed`` returns the tokens to show
    (a multi-token marker may hold a few back until it is told apart)."""

    markup: Markup
    tokenizer: Any
    part: Part = ANSWER
    counts: dict[str, int] = field(default_factory=lambda: {REASONING: 0, ANSWER: 0})
    _held: list[int] = field(default_factory=list)
    _header: list[int] | None = None

    @classmethod
    def for_prompt(cls, tokenizer: Any, prompt: Sequence[int],
                   markup: Markup | None = None) -> "Splitter":
        markup = markup if markup is not None else markup_of(tokenizer)
        out = cls(markup, tokenizer)
        if starts_in_reasoning(markup, prompt):
            out.part = REASONING
        elif markup.kind == "harmony" and _last(prompt, markup.turn_start) > max(
                _last(prompt, markup.message), _last(prompt, markup.turn_end)):
            out._header = []  # the prompt ends '<|start|>assistant': a header follows
        return out

    @property
    def reasoning_tokens(self) -> int:
        return self.counts[REASONING]

    @property
    def answer_tokens(self) -> int:
        return self.counts[ANSWER]

    def feed(self, token: int) -> list[tuple[int, Part]]:
        if self.markup.kind == "harmony":
            return self._harmony(token)
        if self.markup.kind == "think":
            return self._think(token)
        self.counts[ANSWER] += 1
        return [(token, ANSWER)]

    def flush(self) -> list[tuple[int, Part]]:
        """At the end of the reply: tokens held back as a possible marker are text."""
        held, self._held = self._held, []
        return [(t, self.part) for t in held]

    # -- think tags --------------------------------------------------------
    def _think(self, token: int) -> list[tuple[int, Part]]:
        marker = self.markup.end if self.part == REASONING else self.markup.start
        self._held.append(token)
        self.counts[self.part] += 1
        if tuple(self._held) == marker:
            self._held = []
            if self.part == ANSWER:
                self.counts[ANSWER] -= len(marker)  # the opening marker is reasoning's
                self.counts[REASONING] += len(marker)
            self.part = ANSWER if self.part == REASONING else REASONING
            return []
        if tuple(self._held) == marker[:len(self._held)]:
            return []  # maybe the start of a multi-token marker
        last = self._held.pop()
        out = self.flush()
        if last == marker[0]:
            self._held = [last]
            return out
        return out + [(last, self.part)]

    # -- harmony channels --------------------------------------------------
    def _harmony(self, token: int) -> list[tuple[int, Part]]:
        m = self.markup
        if self._header is not None:
            if token == m.message:
                name = self.tokenizer.decode(self._header).strip()
                channel = (name.split("<|channel|>")[-1].split() or [""])[0]
                self.part = REASONING if channel == "analysis" else ANSWER
                self.counts[self.part] += len(self._header) + 1
                self._header = None
            else:
                self._header.append(token)
                if len(self._header) > HEADER_MAX:
                    # Not a header after all (a model that ignores the format):
                    # what was held is text of the current part.
                    held, self._header = self._header, None
                    self.counts[self.part] += len(held)
                    return [(t, self.part) for t in held]
            return []
        if token in (m.channel, m.turn_start):
            self.counts[self.part] += 1
            self._header = []  # up to '<|message|>': role and channel name, not shown
            return []
        self.counts[self.part] += 1
        if token == m.turn_end:
            return []
        return [(token, self.part)]


class PartText:
    """Detokenizes labelled tokens into ``on_text(segment, part)`` calls; a
    change of part flushes the text so far under its own part. Leading
    whitespace of reasoning, and of an answer after reasoning, is not shown."""

    def __init__(self, detok: Any, on_text: Callable[[str, Part], None]):
        self.detok, self.on_text = detok, on_text
        self.part: Part = ANSWER
        self.shown: set[str] = set()
        detok.reset()

    def add(self, labelled: list[tuple[int, Part]]) -> None:
        for token, part in labelled:
            if part != self.part:
                self.close()
                self.detok.reset()
                self.part = part
            self.detok.add_token(token)
            self._flush()

    def close(self) -> None:
        self.detok.finalize()
        self._flush()

    def _flush(self) -> None:
        segment = self.detok.last_segment
        if self.part not in self.shown and (self.part == REASONING or REASONING in self.shown):
            segment = segment.lstrip()
        if segment:
            self.shown.add(self.part)
            self.on_text(segment, self.part)


@dataclass
class SplitReply:
    reasoning: str
    answer: str
    reasoning_tokens: int
    answer_tokens: int


def split_reply(tokenizer: Any, prompt: Sequence[int], ids: Sequence[int]) -> SplitReply:
    """A whole reply's ids (no end token) split as the engine splits them while streaming."""
    split = Splitter.for_prompt(tokenizer, prompt)
    pieces: dict[str, list[str]] = {REASONING: [], ANSWER: []}
    text = PartText(tokenizer.detokenizer, lambda seg, part: pieces[part].append(seg))
    for token in ids:
        text.add(split.feed(token))
    text.add(split.flush())
    text.close()
    return SplitReply("".join(pieces[REASONING]).rstrip(), "".join(pieces[ANSWER]),
                      split.reasoning_tokens, split.answer_tokens)
