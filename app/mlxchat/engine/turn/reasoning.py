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
(the token ledger keeps them whole). One exception is shown as text: a
harmony message to a recipient (``to=functions.NAME``, a tool call) is
written into the answer as its template renders a call back,
``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>
ARGS<|call|>``, which ``models.tools`` reads as a tool call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from mlxchat.models.markup import CALL_END, Markup, call_start, markup_of

__all__ = ["ANSWER", "REASONING", "Labelled", "PartText", "Splitter", "split_reply",
           "starts_in_reasoning"]

Part = Literal["reasoning", "answer"]
HEADER_MAX = 64
"""Tokens a harmony header (role, channel, recipient) may take before '<|message|>'."""
REASONING: Part = "reasoning"
ANSWER: Part = "answer"
Labelled = tuple[int | str, Part]
"""A token and its part, or markup text to show as it is (a tool call's frame)."""
_RECIPIENT = re.compile(r"to=([^\s<]+)")


def _header(tokenizer: Any, ids: Sequence[int]) -> tuple[str, str | None]:
    """A harmony header's channel and recipient, from its text: 'assistant
    to=functions.f<|channel|>commentary json' or 'assistant<|channel|>commentary
    to=functions.f <|constrain|>json'."""
    text = tokenizer.decode(list(ids)).strip()
    channel = (text.split("<|channel|>")[-1].split() or [""])[0]
    recipient = _RECIPIENT.search(text)
    return channel, recipient.group(1) if recipient else None


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
    call: str | None = None
    """The recipient of the harmony tool call being written (None: no call)."""
    _after_end: bool = False

    @classmethod
    def for_prompt(cls, tokenizer: Any, prompt: Sequence[int],
                   markup: Markup | None = None) -> "Splitter":
        markup = markup if markup is not None else markup_of(tokenizer)
        out = cls(markup, tokenizer)
        if starts_in_reasoning(markup, prompt):
            out.part = REASONING
        elif markup.kind == "harmony":
            start, message = _last(prompt, markup.turn_start), _last(prompt, markup.message)
            if start > max(message, _last(prompt, markup.turn_end)):
                out._header = []  # the prompt ends '<|start|>assistant': a header follows
            elif start >= 0 and message > max(start, _last(prompt, markup.turn_end)):
                # The prompt opens the message itself ('...<|channel|>analysis<|message|>').
                channel, _ = _header(tokenizer, prompt[start + 1:message])
                out.part = REASONING if channel == "analysis" else ANSWER
        return out

    @property
    def reasoning_tokens(self) -> int:
        return self.counts[REASONING]

    @property
    def answer_tokens(self) -> int:
        return self.counts[ANSWER]

    def feed(self, token: int) -> list[Labelled]:
        if self.markup.kind == "harmony":
            return self._harmony(token)
        if self.markup.kind == "think":
            return self._think(token)
        self.counts[ANSWER] += 1
        return [(token, ANSWER)]

    def flush(self) -> list[Labelled]:
        """At the end of the reply: tokens held back as a possible marker are text."""
        held, self._held = self._held, []
        return [(t, self.part) for t in held]

    def end(self, token: int) -> list[Labelled]:
        """The reply ended with ``token`` (an end token, not fed): a harmony
        call it ends ('<|call|>') is closed in the text."""
        if self.call is not None and token == self.markup.call:
            self.call = None
            return [(CALL_END, ANSWER)]
        return []

    def force(self, tokens: Sequence[int]) -> list[Labelled]:
        """Feed the tokens that close the reasoning (``closing``): all of them
        are counted as the reasoning's markup, the answer's head included."""
        before = self.counts[ANSWER]
        out = [pair for token in tokens for pair in self.feed(token)]
        moved = self.counts[ANSWER] - before
        self.counts[ANSWER] -= moved
        self.counts[REASONING] += moved
        return out

    def closing(self) -> tuple[int, ...] | None:
        """The tokens that close the reasoning now, as the family writes it:
        the think-end tag, or the end of the analysis message and the head of
        the final one. None: not now (a harmony header is being read); ():
        there is nothing this markup can close."""
        m = self.markup
        if self.part != REASONING:
            return ()
        if m.kind == "think":
            return m.end
        if m.kind != "harmony" or not m.final:
            return ()
        if self._header is not None:
            return None
        return m.final if self._after_end else (m.turn_end, *m.final)

    # -- think tags --------------------------------------------------------
    def _think(self, token: int) -> list[Labelled]:
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
    def _harmony(self, token: int) -> list[Labelled]:
        m = self.markup
        self._after_end = token == m.turn_end
        if self._header is not None:
            if token == m.message:
                channel, recipient = _header(self.tokenizer, self._header)
                self.part = REASONING if channel == "analysis" and not recipient else ANSWER
                self.counts[self.part] += len(self._header) + 1
                self._header = None
                if recipient:  # a tool call: shown framed as its template writes it
                    self.call = recipient
                    return [(call_start(recipient), ANSWER)]
            else:
                self._header.append(token)
                if len(self._header) > HEADER_MAX:
                    # Not a header after all (a model that ignores the format):
                    # what was held is text of the current part.
                    held, self._header = self._header, None
                    self.counts[self.part] += len(held)
                    return [(t, self.part) for t in held]
            return []
        self.counts[self.part] += 1
        if token not in (m.channel, m.turn_start, m.turn_end):
            return [(token, self.part)]
        ended: list[Labelled] = []
        if self.call is not None:  # a call that ends without '<|call|>'
            self.call, ended = None, [(CALL_END, ANSWER)]
        if token != m.turn_end:
            self._header = []  # up to '<|message|>': role and channel name, not shown
        return ended


class PartText:
    """Detokenizes labelled tokens into ``on_text(segment, part)`` calls; a
    change of part flushes the text so far under its own part. Leading
    whitespace of reasoning, and of an answer after reasoning, is not shown."""

    def __init__(self, detok: Any, on_text: Callable[[str, Part], None]):
        self.detok, self.on_text = detok, on_text
        self.part: Part = ANSWER
        self.shown: set[str] = set()
        detok.reset()

    def add(self, labelled: list[Labelled]) -> None:
        for token, part in labelled:
            if part != self.part:
                self.close()
                self.detok.reset()
                self.part = part
            if isinstance(token, str):  # markup text, after the text so far
                self.close()
                self.detok.reset()
                self.shown.add(part)
                self.on_text(token, part)
                continue
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


def split_reply(tokenizer: Any, prompt: Sequence[int], ids: Sequence[int], *,
                end_token: int | None = None) -> SplitReply:
    """A whole reply's ids (no end token) split as the engine splits them
    while streaming; ``end_token`` is the end token that followed them."""
    split = Splitter.for_prompt(tokenizer, prompt)
    pieces: dict[str, list[str]] = {REASONING: [], ANSWER: []}
    text = PartText(tokenizer.detokenizer, lambda seg, part: pieces[part].append(seg))
    for token in ids:
        text.add(split.feed(token))
    text.add(split.flush())
    if end_token is not None:
        text.add(split.end(end_token))
    text.close()
    return SplitReply("".join(pieces[REASONING]).rstrip(), "".join(pieces[ANSWER]),
                      split.reasoning_tokens, split.answer_tokens)
