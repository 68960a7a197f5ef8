"""The conversation as the loaded model's tokens, for the engine's callers:
renders, the token ledger's deltas, fitting the window and the reply's room.
Tokenizer work only (no MLX): safe from any thread, never queued on the
engine's."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from mlxchat.chat import ImageRef, Message
from mlxchat.engine.prompt import delta
from mlxchat.engine.prompt import images as prompt_images
from mlxchat.engine.prompt.control import encode_plain
from mlxchat.engine.prompt.delta import TemplateOptions
from mlxchat.engine.prompt.fit import FittedPrompt, fit, reply_reserve
from mlxchat.engine.prompt.render import message_token_counts, render, template_opening
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel
from mlxchat.models.markup import cached_markup
from mlxchat.models.token_floor import longest_token_bytes


class PromptBuilder:
    """Prompts for whichever model the engine holds now (``loaded()``: a model
    switch or a recast changes it)."""

    def __init__(self, loaded: Callable[[], LoadedModel]):
        self._loaded = loaded

    def read_vocabulary(self) -> None:
        """What turns read of the vocabulary once per process, read now (a
        server's warm-up): the longest token (the fit check's floor), the
        reasoning markup (the reply's budget) and whether plain text starts
        with a space (message text spliced between control tokens). Seconds
        each for a vocabulary of 262k tokens, which a first request would pay."""
        tokenizer = self._loaded().tokenizer
        longest_token_bytes(tokenizer)
        cached_markup(tokenizer)
        encode_plain(tokenizer, "warm", at_start=False)

    def fit(self, messages: Sequence[Message], settings: GenerationSettings, *,
            options: TemplateOptions = TemplateOptions(),
            reserve: int | None = None) -> FittedPrompt:
        """Render the whole conversation and fit it to the window under the
        settings' policy (a new ledger, or ``history=template``); ``reserve``:
        tokens left for the reply (None: from the settings, ``reply_reserve``)."""
        loaded = self._loaded()
        prompt_images.check_sees(loaded, prompt_images.images_of(messages))
        budget = self.reply_budget(settings) if reserve is None else reserve
        fitted = fit(loaded.tokenizer, messages, window=self.window(settings),
                     max_tokens=budget, policy=settings.context_policy,
                     template_kwargs=options.kwargs())
        refs = prompt_images.images_of(fitted.messages)
        return replace(fitted, tokens=prompt_images.expand(loaded, fitted.tokens, refs)) \
            if refs else fitted

    def message_ids(self, text: str, *, system: str | None, previous: Sequence[int] | None,
                    options: TemplateOptions = TemplateOptions(),
                    images: Sequence[ImageRef] = ()) -> list[int]:
        """The token ids a user message adds: after ``previous`` (the ids of the
        reply it follows), or as the first message of a conversation (None);
        each of ``images`` (shown before the text) as its span. Raises
        TemplateNotIncremental when the template cannot be split so,
        ImagesRefused when the model sees no images."""
        return self.turn_ids([Message("user", text, images=tuple(images))], system=system,
                             previous=previous, options=options)

    def turn_ids(self, messages: Sequence[Message], *, system: str | None,
                 previous: Sequence[int] | None,
                 options: TemplateOptions = TemplateOptions()) -> list[int]:
        """The same for a turn of several messages: a user message and system
        messages that stand beside it (each with its images), in order."""
        loaded = self._loaded()
        images = [ref for m in messages for ref in m.images]
        prompt_images.check_sees(loaded, images)
        tokenizer = loaded.tokenizer
        if previous is None:
            ids = delta.turn_head(tokenizer, system, messages, options)
        else:
            ids = delta.turn_after(tokenizer, messages, previous=previous, options=options)
        return prompt_images.expand(loaded, ids, images)

    def opened_reply(self, text: str, *, options: TemplateOptions = TemplateOptions()
                     ) -> tuple[int, list[int]]:
        """A reply the request begins with ``text`` (continued by the model):
        how many of the last message's ids it replaces, and the ids it adds
        (``delta.opened_reply``). TemplateRefused when the template cannot."""
        return delta.opened_reply(self._loaded().tokenizer, text, options)

    def image_tokens(self, ref: ImageRef) -> int:
        """Tokens ``ref`` takes in this model's window (from its header: no
        decoding). ImagesRefused when the model sees no images."""
        loaded = self._loaded()
        prompt_images.check_sees(loaded, [ref])
        return loaded.model.know([ref])[0].tokens

    def result_ids(self, results: Sequence[Message], *, reply: Message,
                   previous: Sequence[int], options: TemplateOptions = TemplateOptions()
                   ) -> list[int]:
        """The token ids tool results add after ``reply`` (whose ids are
        ``previous``). Raises TemplateNotIncremental when the template cannot
        be split so."""
        return delta.tool_results(self._loaded().tokenizer, results, reply=reply,
                                  previous=previous, options=options)

    def window(self, settings: GenerationSettings) -> int:
        """The context window a turn gets: the model's, or the session's cap below it."""
        model = self._loaded().info.context_window
        return min(model, settings.context_window) if settings.context_window else model

    def reply_budget(self, settings: GenerationSettings) -> int:
        """Tokens a reply may take: the answer's, plus the reasoning's for a
        model that reasons (unless /think off)."""
        reasons = cached_markup(self._loaded().tokenizer).reasons
        extra = settings.max_reasoning_tokens if reasons and settings.thinking is not False else 0
        return settings.max_tokens + extra

    def reply_reserve(self, settings: GenerationSettings) -> int:
        """Tokens kept free for the reply when deciding whether a prompt fits."""
        return reply_reserve(self.reply_budget(settings), self.window(settings))

    def render_tokens(self, messages: Sequence[Message], *,
                      options: TemplateOptions = TemplateOptions()) -> list[int]:
        """The conversation through the template as it would render it now
        (no generation prompt)."""
        return render(self._loaded().tokenizer, messages, generation_prompt=False,
                      **options.kwargs())

    def count_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens of the conversation's prompt (with the generation prompt)."""
        return len(render(self._loaded().tokenizer, messages))

    def message_tokens(self, messages: Sequence[Message]) -> list[int]:
        """Tokens each message adds to the rendered prompt."""
        return message_token_counts(self._loaded().tokenizer, messages)

    def opening(self, *, options: TemplateOptions = TemplateOptions()) -> list[int]:
        """What the template puts before the first message of a conversation
        without a system message (begin-of-text, its default system prompt)."""
        return template_opening(self._loaded().tokenizer, **options.kwargs())
