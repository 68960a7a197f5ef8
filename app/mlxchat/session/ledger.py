"""The token ledger: a branch's token sequence is the ids each message added
when it was sent. A turn's prompt is the ledger plus the new message's ids;
earlier messages are never re-rendered, so the model sees exactly what it saw
before and the cache always matches. Warm, resumed and cold turns therefore
give the same reply by construction.

A new ledger starts (the whole conversation rendered once, with the reason)
when there is none yet, when the model, template, system prompt or pinned
documents changed, or
when the context policy had to drop messages to fit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from mlxchat.chat import ImageRef, Message, Session, latest_summary, model_view, summary_block
from mlxchat.engine.events import TurnDone
from mlxchat.engine.interface import Engine
from mlxchat.engine.prompt.delta import TemplateNotIncremental, TemplateOptions
from mlxchat.engine.prompt.fit import FittedPrompt, refuse_unfittable
from mlxchat.generation import GenerationSettings
from mlxchat.turn_stats import NEW_CONVERSATION


@dataclass(frozen=True)
class OpenedReply:
    """Text a reply begins with, given by the request (assistant prefill), and
    the ids it adds to the prompt: the model continues it."""

    text: str
    ids: list[int]

    def joined(self, done: TurnDone) -> TurnDone:
        """The reply as it is stored: this text and its ids, then the model's."""
        return replace(done, reply=self.text + done.reply, token_ids=self.ids + done.token_ids)


@dataclass
class Plan:
    """A turn's prompt and what the new user message adds to the ledger."""

    prompt: FittedPrompt
    user_ids: list[int] | None = None
    """Ids to store with the new user message; None outside the ledger."""
    start: bool = False
    """The new message starts a ledger (its ids are the whole prompt)."""
    key: str | None = None
    prefill: OpenedReply | None = None
    """The text the reply begins with (its ids end the prompt), if any."""
    overflow: bool = False
    """The ledger did not fit the window: the history was rendered again and
    fitted under the context policy (the oldest messages left out)."""


OVERFLOW = "context overflow: history re-rendered to fit"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def options_for(session: Session, settings: GenerationSettings | None = None, *,
                tools: str | None = None) -> TemplateOptions:
    """What the session fixes for its template: the date it started, the
    turn's thinking switch and reasoning effort, and how tools reach it."""
    settings = settings or session.settings
    return TemplateOptions(date=session.created, enable_thinking=settings.thinking,
                           reasoning_effort=settings.reasoning_effort, tools=tools,
                           generic_tools=settings.tool_prompt == "generic")


def key_for(engine: Engine, session: Session, options: TemplateOptions, *,
            compute_dtype: str | None = None) -> str:
    """model+template · system prompt · template options (with the tools, which
    the template renders for every message; and the session's compute dtype
    where it is not the model's default: the cache differs). The thinking
    switch is left out: it changes only the generation prompt of the turns
    after it, never the tokens earlier messages were sent with."""
    info = engine.info
    kept = replace(options, enable_thinking=None)
    system = _short_hash(session.system_prompt or "")
    if session.pins:  # sessions without pins keep the keys they always had
        system += "+" + _short_hash(session.context_system or "")
    computes = ""
    if compute_dtype and compute_dtype != info.default_compute_dtype:
        computes = "+" + compute_dtype
    rendered = repr(kept) + (f"tools={options.tools}" if options.tools else "") \
        + ("+generic" if options.tools and options.generic_tools else "")
    return ":".join((_short_hash((info.model_fingerprint or info.fingerprint)
                                 + info.chat_template_hash),
                     system, _short_hash(rendered) + computes))


def _key_change(old: str | None, new: str) -> str:
    if old is None:
        return "no token ledger yet: the conversation was rendered once"
    parts = old.split(":"), new.split(":")
    if len(parts[0]) != 3 or parts[0][0] != parts[1][0]:
        return "model or chat template changed: new token ledger"
    if parts[0][1] != parts[1][1]:
        if parts[0][1].split("+")[0] == parts[1][1].split("+")[0]:
            return "pinned documents changed"
        return "system prompt changed"
    if parts[0][2].split("+")[0] == parts[1][2].split("+")[0]:
        return "compute dtype changed: new token ledger"
    return "template options or tools changed: new token ledger"


def branch_ids(messages: Sequence[Message], key: str) -> tuple[list[int] | None, str | None]:
    """The branch's ledger, or None and why it cannot be used."""
    start = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].ledger_start),
                 None)
    if start is None:
        return None, _key_change(None, key)
    ids: list[int] = []
    for m in messages[start:]:
        if m.token_ids is None:
            return None, _key_change(None, key)
        if m.ledger_key != key:
            return None, _key_change(m.ledger_key, key)
        ids.extend(m.token_ids)
    return ids, None


def _answered(history: Sequence[Message]) -> bool:
    """The branch ends with a reply (a summary after it ends with the reply's ids)."""
    last = [m for m in history[-2:] if m.role != "summary"]
    return bool(last) and last[-1].role == "assistant"


class Ledger:
    """Plans turns over one session's ledger with one engine."""

    def __init__(self, engine: Engine, session: Session, settings: GenerationSettings, *,
                 tools: str | None = None, reserve: int | None = None):
        # ``reserve``: tokens the prompt leaves for the reply (None: the settings'
        # max_tokens, at most half the window).
        self.engine = engine
        self.session = session
        self.settings = settings
        self.reserve = reserve
        self.options = options_for(session, settings, tools=tools)
        self.key = key_for(engine, session, self.options, compute_dtype=settings.compute_dtype)

    def _with_system(self, messages: Sequence[Message]) -> list[Message]:
        """The branch as the model sees it (``chat.model_view``), system part first."""
        system = self.session.context_system
        return ([Message("system", system)] if system else []) + model_view(messages)

    def _rendered(self, messages: Sequence[Message], reason: str | None) -> FittedPrompt:
        fitted = self.engine.prompts.fit(self._with_system(messages), self.settings,
                                         options=self.options, reserve=self.reserve)
        return replace(fitted, reason=fitted.reason or (None if fitted.dropped else reason))

    def _fits(self, n: int) -> bool:
        prompts = self.engine.prompts
        reserve = prompts.reply_reserve(self.settings) if self.reserve is None else self.reserve
        return n + reserve <= prompts.window(self.settings)

    def plan_message(self, history: Sequence[Message], text: str, *,
                     images: tuple[ImageRef, ...] = (), fresh: bool = False) -> Plan:
        """The prompt for a new user message ``text`` (showing ``images``) after
        ``history``; ``fresh``: it starts a conversation (not an edit), which
        is what a cache holding another is told."""
        def added() -> list[int]:
            return self.engine.prompts.message_ids(
                text, system=self.session.context_system,
                previous=history[-1].token_ids if history else None, options=self.options,
                images=images)

        plan = self._plan_new(history, [Message("user", text, images=images)], added,
                              first=not history)
        if fresh and not history and plan.prompt.reason is None:
            plan = replace(plan, prompt=replace(plan.prompt, reason=NEW_CONVERSATION))
        return plan

    def plan_turn(self, history: Sequence[Message], messages: Sequence[Message]) -> Plan:
        """The prompt for a turn of several messages after ``history``: a user
        message and system messages that stand beside it, in order (the
        first holds the ids they add together)."""
        def added() -> list[int]:
            return self.engine.prompts.turn_ids(
                messages, system=self.session.context_system,
                previous=history[-1].token_ids if history else None, options=self.options)

        return self._plan_new(history, list(messages), added, first=not history)

    def plan_results(self, history: Sequence[Message], results: Sequence[Message]) -> Plan:
        """The prompt for tool results after ``history`` (whose last message is
        the reply that called the tools); ``user_ids`` are what they add together."""
        def added() -> list[int]:
            reply = next(m for m in reversed(history) if m.role != "summary")
            return self.engine.prompts.result_ids(
                results, reply=reply, previous=reply.token_ids or [], options=self.options)

        return self._plan_new(history, list(results), added, first=False)

    def _plan_new(self, history: Sequence[Message], new: list[Message],
                  added: Callable[[], list[int]], *, first: bool) -> Plan:
        """New messages after ``history``: the ledger extended by what they add
        (``added``), or the conversation rendered whole (a new ledger, and why)."""
        # Before the new text is tokenized: one that cannot fit at all is refused now.
        refuse_unfittable(self.engine.loaded.tokenizer, [m.content for m in new],
                          window=self.engine.prompts.window(self.settings))
        if self.settings.history == "template":
            return Plan(self._rendered([*history, *new], None))
        ids, reason = branch_ids(history, self.key) if history else ([], None)
        if ids is not None and (first or _answered(history)):
            try:
                new_ids = added()
            except TemplateNotIncremental as exc:
                reason = f"{exc}: new token ledger"
            else:
                tokens = ids + new_ids
                if self._fits(len(tokens)):
                    prompt = FittedPrompt(tokens, self._with_system([*history, *new]), 0,
                                          ledger=True)
                    return Plan(prompt, new_ids, start=first, key=self.key)
                reason = OVERFLOW
        elif ids is not None:
            reason = "the previous message has no reply: new token ledger"
        fitted = self._rendered([*history, *new], reason)
        return Plan(fitted, list(fitted.tokens), start=True, key=self.key,
                    overflow=reason == OVERFLOW or fitted.dropped > 0)

    def compacted(self, branch: Sequence[Message], first: int, summary: str) -> list[int] | None:
        """The ledger of ``branch`` once compacted: the system part and
        ``summary`` in front of ``branch[first]`` (a user message), rendered as
        a first message, then every later message's ids as they were sent;
        where a later message has none to give (a history an API client sent,
        another ledger), all of it rendered once, to the last reply's end
        token. None when neither can be (an image, no reply at the end)."""
        ids, _ = branch_ids(branch, self.key)
        later = [m for m in branch[first + 1:] if m.role != "summary"]
        head = branch[first]
        if ids is None or any(m.ledger_start or m.token_ids is None or m.ledger_key != self.key
                              for m in later):
            return self._compacted_render([replace(
                head, content=summary_block(summary) + "\n\n" + head.content), *later])
        try:
            opening = self.engine.prompts.message_ids(
                summary_block(summary) + "\n\n" + head.content,
                system=self.session.context_system, previous=None, options=self.options,
                images=head.images)
        except TemplateNotIncremental:
            return None
        return opening + [t for m in later for t in (m.token_ids or ())]

    def _compacted_render(self, view: list[Message]) -> list[int] | None:
        """``view`` after the system part through the template, cut after the
        last reply's end token: what a ledger holds (a reply's ids end with the
        end token sampled; the next message's render adds the rest)."""
        if not view or view[-1].role != "assistant" or any(m.images for m in view):
            return None
        tokens = self.engine.prompts.render_tokens(self._with_system(view), options=self.options)
        ends = set(self.engine.loaded.tokenizer.eos_token_ids)
        cut = max((i for i, t in enumerate(tokens) if t in ends), default=None)
        return None if cut is None else tokens[:cut + 1]

    def opened(self, plan: Plan, text: str | None) -> Plan:
        """``plan`` with its reply begun by ``text`` (None or empty: as it is):
        the new message's ids give up what the template does not write before
        a written reply, and the prompt ends with the open reply's ids."""
        if not text:
            return plan
        drop, ids = self.engine.prompts.opened_reply(text, options=self.options)
        tokens, mine = plan.prompt.tokens, plan.user_ids
        return replace(plan, prompt=replace(plan.prompt, tokens=tokens[:len(tokens) - drop] + ids),
                       user_ids=None if mine is None else mine[:len(mine) - drop],
                       prefill=OpenedReply(text, ids))

    def note(self, branch: Sequence[Message]) -> str | None:
        """One line when the ledger differs from what the template would render
        for this branch today (kept reasoning, a moved system prompt, trimmed text)."""
        if self.settings.history == "template" or not branch:
            return None
        ids, _ = branch_ids(branch, self.key)
        if ids is None:
            return None
        today = self.engine.prompts.render_tokens(self._with_system(branch), options=self.options)
        shared = 0
        while shared < min(len(ids), len(today)) and ids[shared] == today[shared]:
            shared += 1
        if shared >= len(ids) - 1:
            return None
        return (f"the cache holds this conversation as it was sent ({len(ids):,} tokens); "
                f"the template would render it differently from token {shared:,} today — "
                "/set history template follows it exactly, re-prefilling each turn")

    def costs(self, branch: Sequence[Message], system_ids: Sequence[int]) -> list[int] | None:
        """Tokens each message of ``branch`` holds in the ledger, with the system
        part (``system_ids``) first when the session has one; None when the
        branch has no usable ledger from its first message on."""
        if self.settings.history == "template" or not branch or not branch[0].ledger_start:
            return None
        ids, _ = branch_ids(branch, self.key)
        if ids is None or any(m.ledger_start for m in branch[1:]):
            return None  # a later message restarted the ledger: it re-rendered the history
        counts = [len(m.token_ids or ()) for m in branch]
        if not self.session.context_system:
            return counts
        first = branch[0].token_ids or []
        system = len(system_ids) if list(first[:len(system_ids)]) == list(system_ids) else 0
        return [system, counts[0] - system, *counts[1:]]

    def compacted_costs(self, branch: Sequence[Message], system_ids: Sequence[int]
                        ) -> tuple[list[Message], list[int]] | None:
        """After a compaction: the rows the model sees (the system part, the
        summary, the first message kept, the messages after it) and the tokens
        each holds in the ledger; None without a usable compacted ledger."""
        at = latest_summary(branch)
        ids, _ = branch_ids(branch, self.key)
        if at is None or ids is None or self.settings.history == "template":
            return None
        marker = branch[at]
        first = at - marker.compaction.kept  # type: ignore[union-attr]
        before = [m for m in branch[first + 1:at] if m.role != "summary"]
        head = len(marker.token_ids or ()) - sum(len(m.token_ids or ()) for m in before)
        system = self.session.context_system
        plain = len(self.engine.prompts.message_ids(
            branch[first].content, system=system, previous=None, options=self.options,
            images=branch[first].images))
        own = len(system_ids) if system else 0
        rows = [Message("system", system)] if system else []
        rows += [Message("summary", marker.content, compaction=marker.compaction),
                 branch[first]] + [m for m in branch[first + 1:] if m.role != "summary"]
        counts = ([own] if system else []) + [head - plain, plain - own] + [
            len(m.token_ids or ()) for m in branch[first + 1:] if m.role != "summary"]
        return rows, counts

    def used(self, branch: Sequence[Message]) -> int | None:
        """Tokens the branch holds in its ledger (what the next turn's prompt
        starts with), read off the stored ids; None when it has no usable one."""
        if self.settings.history == "template":
            return None
        ids, _ = branch_ids(branch, self.key)
        return None if ids is None else len(ids)

    def plan_existing(self, branch: Sequence[Message]) -> Plan:
        """The prompt to answer the branch's last (user) message again."""
        if self.settings.history == "template":
            return Plan(self._rendered(branch, None))
        ids, reason = branch_ids(branch, self.key)
        if ids is not None and self._fits(len(ids)):
            # The key goes with the plan: the new reply's ids extend the ledger.
            return Plan(FittedPrompt(ids, self._with_system(branch), 0, ledger=True),
                        key=self.key)
        fitted = self._rendered(branch, reason or OVERFLOW)
        return Plan(fitted, list(fitted.tokens), start=True, key=self.key)
