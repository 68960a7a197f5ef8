"""What the chat service says of a reply, in the order it comes: ``Planned``
(the prompt's figures, before its prefill runs), ``Piece``s of its text, then
``Finished``; and ``Readers``, which turn each choice's engine events into them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from mlxchat.chat import CalledTool
from mlxchat.engine.events import ChoiceDone, TextDelta, TokenLogprob
from mlxchat.engine.turn.reply_options import ReplyOptions
from mlxchat.server.core.reply_reader import ChoiceReader
from mlxchat.turn_stats import TurnStats


@dataclass
class Piece:
    """New text of the reply: its answer or its reasoning."""

    text: str
    part: str = "answer"
    cache_miss: str | None = None
    """On a reply's first piece: why its conversation's KV was recomputed
    (its files were evicted), for the response's headers."""
    choice: int = 0
    """Which of the request's choices (``n``) it belongs to."""
    logprobs: tuple[TokenLogprob, ...] = ()
    """The figures of the tokens that wrote it (log-probabilities asked for)."""


@dataclass
class Finished:
    """The end of a reply: what the client saw of it and the turn's figures."""

    content: str
    reasoning: str
    stats: TurnStats
    finish_reason: str
    session_id: int | None
    """None for a raw completion (no session)."""
    tool_calls: tuple[CalledTool, ...] = ()
    cache_miss: str | None = None
    """Why the conversation's KV was recomputed (its files were evicted)."""
    stop_sequence: str | None = None
    """The stop string that ended the reply, if one did."""
    choice: int = 0
    """Which of the request's choices it ends; the last item is choice 0's."""
    logprobs: tuple[TokenLogprob, ...] | None = None
    """Every answer token's figures (None: not asked for)."""
    others: tuple[Finished, ...] = ()
    """On choice 0's end: the other choices' ends (they came before it)."""
    reply_id: int | None = None
    """The stored reply's message id (a follow-up may continue after it)."""
    recalled: tuple[dict[str, Any], ...] = ()
    """The passages of earlier messages, no longer in the model's view, that the
    request's message brought back (``Recall.report``)."""


@dataclass
class Planned:
    """The prompt's figures once its prefill is planned (before it runs): what
    a stream that starts early says first."""

    prompt_tokens: int
    reused_tokens: int
    """Of ``prompt_tokens``, those the KV cache holds already."""
    cache_miss: str | None = None
    """As a first piece's (``Piece.cache_miss``)."""


def join_pieces(a: Piece | Finished, b: Piece | Finished) -> Piece | None:
    """Two pieces of the same part that arrived together, as one (fewer chunks
    to encode and send when the client reads slower than the model writes)."""
    if isinstance(a, Piece) and isinstance(b, Piece) and (a.part, a.choice) == (b.part,
                                                                                  b.choice):
        return Piece(a.text + b.text, a.part, a.cache_miss or b.cache_miss, a.choice,
                     a.logprobs + b.logprobs)
    return None


class Readers:
    """Each choice's reader (``ChoiceReader``), and the ends of the choices
    other than the first, said as they come."""

    def __init__(self, tokenizer: Any, stops: list[str], *, tools: bool,
                 max_calls: int | None = None):
        self._new = lambda: ChoiceReader(tokenizer, stops, tools=tools, max_calls=max_calls)
        self._all: dict[int, ChoiceReader] = {}
        self.ended: list[Finished] = []

    def __getitem__(self, choice: int) -> ChoiceReader:
        if choice not in self._all:
            self._all[choice] = self._new()
        return self._all[choice]

    def piece(self, event: TextDelta) -> Piece | None:
        if event.part == "reasoning":
            return Piece(event.text, event.part, choice=event.choice) if event.text else None
        said = self[event.choice].feed(event)
        return None if said is None else Piece(said[0], choice=event.choice, logprobs=said[1])

    def rest(self, choice: int) -> Piece | None:
        said = self[choice].flush()
        return None if said is None else Piece(said[0], choice=choice, logprobs=said[1])

    def figures(self, choice: int, options: ReplyOptions) -> tuple[TokenLogprob, ...] | None:
        return None if options.logprobs is None else tuple(self[choice].said)

    def other_end(self, done: ChoiceDone, options: ReplyOptions) -> Iterator[Piece | Finished]:
        rest = self.rest(done.choice)
        if rest is not None:
            yield rest
        reader = self[done.choice]
        reply, calls = reader.parts()
        stats = TurnStats(generated_tokens=done.generated_tokens,
                          finish_reason=done.finish_reason)
        end = Finished(reply.content, done.reasoning, stats,
                       reader.finish_reason(done.finish_reason), None, calls,
                       stop_sequence=reader.watch.matched, choice=done.choice,
                       logprobs=self.figures(done.choice, options))
        self.ended.append(end)
        yield end
