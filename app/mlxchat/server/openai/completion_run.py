"""OpenAI's legacy completion request, read (``parse``) and run (``work``):
each prompt's tokens straight through the engine, no chat template and no
conversation, one turn per prompt with its ``n`` choices, in the lane like
every turn; nothing is stored (the chat session whose KV it displaced gets
its branch back from its segments on its next turn)."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Iterator

from mlxchat.engine.events import (ChoiceDone, PromptLogprobs, TextDelta, TokenLogprob,
                                   TurnDone)
from mlxchat.engine.prompt.fim import fim_ids
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.engine.turn.constrained import CompiledFormat
from mlxchat.engine.turn.reply_options import ReplyOptions
from mlxchat.server.core.errors import ApiError, bad_field, missing_field, server_stopped
from mlxchat.server.core.reply_asks import logit_bias, penalties
from mlxchat.server.core.reply_reader import ChoiceReader
from mlxchat.server.core.requests import sampling, stop_strings, whole_number
from mlxchat.server.core.service import ChatService, Finished, Piece, started_unless_gone
from mlxchat.server.openai import fields
from mlxchat.server.openai.protocol import openai_common, top_logprobs

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
MAX_PROMPTS = 64
"""Prompts one request may give (each one turn after the other)."""

Prompt = str | list[int]


@dataclass
class CompletionRequest:
    model: str
    prompts: list[Prompt]
    settings: dict[str, Any]
    stream: bool
    stop: list[str]
    include_usage: bool
    options: ReplyOptions
    n: int = 1
    """Choices returned per prompt (``best_of`` may sample more: ``options.choices``)."""
    echo: bool = False
    suffix: str | None = None
    """The text after the gap a fill-in-the-middle completion fills."""
    scored_only: bool = False
    """``max_tokens`` 0 with ``echo``: the prompt's figures, no completion."""
    logprobs: bool = False
    """The client asked for log-probabilities (``best_of`` may need them alone)."""
    output: CompiledFormat | None = None
    """The schema the completion follows (``response_format``), compiled."""


@dataclass
class Echoed:
    """A choice's prompt, said before its completion (``echo``)."""

    choice: int
    text: str
    figures: tuple[TokenLogprob | None, ...] | None
    first: int
    """The prompt's first token (it has no figures)."""


@dataclass
class ChoiceEnd:
    """A choice's end: its whole completion and how it ended."""

    choice: int
    text: str
    finish_reason: str
    generated: int
    figures: tuple[TokenLogprob, ...] | None


def _prompts(data: dict[str, Any]) -> list[Prompt]:
    """``prompt``: a string, a list of strings, a list of token ids, or a list of those."""
    if "prompt" not in data:
        raise missing_field("prompt")
    raw = data["prompt"]
    if isinstance(raw, str) or (isinstance(raw, list) and raw and _ids(raw)):
        raw = [raw]
    if not isinstance(raw, list) or not raw or len(raw) > MAX_PROMPTS \
            or not all((isinstance(p, str) and p) or (isinstance(p, list) and p and _ids(p))
                       for p in raw):
        raise bad_field("prompt", "'prompt' must be a non-empty string, a list of token ids, "
                        f"or a list of up to {MAX_PROMPTS} of those.")
    return raw


def _ids(values: list[Any]) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31
               for v in values)


def parse(data: dict[str, Any], *, window: int | None = None) -> CompletionRequest:
    common = openai_common(data, fields.COMPLETIONS)
    prompts = _prompts(data)
    echo = data.get("echo") or False
    if not isinstance(echo, bool):
        raise bad_field("echo", "'echo' must be true or false.")
    suffix = data.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise bad_field("suffix", "'suffix' must be a string.")
    top = top_logprobs(data, "logprobs")
    best_of = whole_number(data, "best_of", 1) or common.choices
    if best_of < common.choices:
        raise bad_field("best_of", f"'best_of' ({best_of}) must be at least 'n' "
                        f"({common.choices}).")
    if best_of > common.choices and common.stream:
        raise bad_field("best_of", "'best_of' above 'n' cannot be streamed: the best "
                        "choices are known only at the end.")
    scored_only = data.get("max_tokens") == 0 and echo
    limits = {k: v for k, v in data.items() if k != "max_tokens" or not scored_only}
    settings = {"max_tokens": 1 if scored_only else DEFAULT_MAX_TOKENS,
                **sampling(limits, max_names=("max_tokens",), window=window)}
    ranked = best_of > common.choices  # ranked by each choice's mean log-probability
    options = ReplyOptions(logit_bias=logit_bias(data), choices=best_of,
                           logprobs=top if top is not None or not ranked else 0,
                           prompt_logprobs=echo and top is not None, **penalties(data))
    return CompletionRequest(common.model, prompts, settings, common.stream,
                             stop_strings(data.get("stop")), common.include_usage, options,
                             n=common.choices, echo=echo, suffix=suffix,
                             scored_only=scored_only, logprobs=top is not None)


def _tokens(service: ChatService, request: CompletionRequest, prompt: Prompt) -> list[int]:
    tokenizer = service.engine.loaded.tokenizer
    if request.suffix is None:
        return list(prompt) if isinstance(prompt, list) else list(tokenizer.encode(prompt))
    text = prompt if isinstance(prompt, str) else tokenizer.decode(prompt)
    ids = fim_ids(tokenizer, text, request.suffix)
    if ids is None:
        raise bad_field("suffix", f"'suffix' needs a model trained to fill in the middle; "
                        f"{service.conv.views.model_info.name}'s tokenizer has no "
                        "fill-in-the-middle tokens.")
    return ids


def work(service: ChatService, request: CompletionRequest, cancelled: threading.Event
         ) -> Iterator[Piece | Echoed | ChoiceEnd | Finished]:
    """On the lane's thread: each prompt's turn, its choices numbered on from
    the last prompt's; then one ``Finished`` with every turn's tokens."""
    if cancelled.is_set():
        return
    engine = service.engine
    settings = dataclasses.replace(service.conv.settings.generation, context_policy="stop",
                                   **request.settings)
    settings.check()
    window = engine.prompts.window(settings)
    service.cache_taken = True
    totals = [0, 0]
    stats = None
    for p, prompt in enumerate(request.prompts):
        tokens = _tokens(service, request, prompt)
        if len(tokens) + 1 > window:
            raise ApiError(400, f"The prompt has {len(tokens):,} tokens; this model's "
                           f"window is {window:,}.", param="prompt",
                           code="context_length_exceeded")
        text = prompt if isinstance(prompt, str) else engine.loaded.tokenizer.decode(prompt)
        turn = _Turn(request, p * request.options.choices, text, tokens[0])
        events = engine.turn(FittedPrompt(tokens, [], 0), settings, output=request.output,
                             options=request.options)
        for event in started_unless_gone(events, cancelled):
            if cancelled.is_set() or turn.stopped:
                engine.cancel()
            yield from turn.read(event)
        if turn.done is None:
            return
        stats = turn.done.stats
        totals[0] += stats.prompt_tokens
        totals[1] += 0 if request.scored_only else turn.generated
    if stats is not None:
        whole = dataclasses.replace(stats, prompt_tokens=totals[0], generated_tokens=totals[1])
        yield Finished("", "", whole, "stop", None)


class _Turn:
    """One prompt's turn as its choices' items."""

    def __init__(self, request: CompletionRequest, base: int, text: str, first: int):
        self.request, self.base, self.text, self.first = request, base, text, first
        self.readers: dict[int, ChoiceReader] = {}
        self.echoed = not request.echo
        self.done: TurnDone | None = None
        self.generated = 0

    @property
    def stopped(self) -> bool:
        """Choice 0 met a stop string and is alone: the turn may end."""
        main = self.readers.get(0)
        return main is not None and main.watch.stopped and self.request.options.choices == 1

    def _reader(self, choice: int) -> ChoiceReader:
        if choice not in self.readers:  # no template: reasoning is text like any other
            self.readers[choice] = ChoiceReader(None, self.request.stop, tools=False)
        return self.readers[choice]

    def read(self, event: Any) -> Iterator[Piece | Echoed | ChoiceEnd]:
        if not self.echoed and (isinstance(event, PromptLogprobs)
                                or not self.request.options.prompt_logprobs):
            self.echoed = True
            figures = event.entries if isinstance(event, PromptLogprobs) else None
            for c in range(self.request.options.choices):
                yield Echoed(self.base + c, self.text, figures, self.first)
        if self.request.scored_only:
            self.done = event if isinstance(event, TurnDone) else self.done
            if isinstance(event, TurnDone):
                yield from (ChoiceEnd(self.base + c, "", "length", 0, () if
                                      self.request.logprobs else None)
                            for c in range(self.request.options.choices))
        elif isinstance(event, TextDelta):
            said = self._reader(event.choice).feed(event)
            if said is not None:
                yield Piece(said[0], choice=self.base + event.choice, logprobs=said[1])
        elif isinstance(event, ChoiceDone):
            yield from self._end(event.choice, event.finish_reason, event.generated_tokens)
        elif isinstance(event, TurnDone):
            self.done = event
            if event.stats.finish_reason == "cancelled" and not self._reader(0).watch.stopped:
                raise server_stopped()  # as a chat completion says it
            yield from self._end(0, event.stats.finish_reason, event.stats.generated_tokens)

    def _end(self, choice: int, reason: str, generated: int) -> Iterator[Piece | ChoiceEnd]:
        reader = self._reader(choice)
        rest = reader.flush()
        if rest is not None:
            yield Piece(rest[0], choice=self.base + choice, logprobs=rest[1])
        self.generated += generated
        figures = tuple(reader.said) if self.request.options.logprobs is not None else None
        yield ChoiceEnd(self.base + choice, reader.watch.seen, reader.finish_reason(reason),
                        generated, figures)
