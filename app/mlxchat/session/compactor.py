"""A conversation longer than the window: its compaction prepared in idle
time, switched to when the window fills, done by hand and undone.

Once the branch's token ledger passes ``compact_at`` percent of the window
(``context_policy compact``), each turn's end starts a thread that prepares,
one engine job at a time (each gives way to any other engine work and is
superseded by a turn): the plan (``compact_plan``: what is summarized, what
is kept), the summary written with the loaded model from a fixed prompt
(``summary_prompt``), then the compacted conversation (system part, summary
in front of the first message kept, the newest messages with the ids they
were sent with) prefilled into the engine's second cache. Nothing is stored
meanwhile: a crash leaves the conversation as it was.

When a message no longer fits, ``switch`` stores the summary as a message of
role ``summary`` after the branch's last message, the compacted ledger's ids
its own (a new ledger: its KV segments are saved under it and restore like
any other), and makes the second cache the live one: the turn prefills only
its own message. Nothing is deleted; ``undo`` moves the branch back before
the summary, whose KV comes back from the files it always had.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from mlxchat.chat import Compaction, Message, latest_summary
from mlxchat.engine.events import EngineError
from mlxchat.engine.interface import Engine
from mlxchat.errors import MlxchatError
from mlxchat.session.cache_keeper import CacheKeeper
from mlxchat.session.compact_plan import CompactPlan, plan_compaction
from mlxchat.session.current import OpenSession
from mlxchat.session.recall import Recall
from mlxchat.session.errors import ConversationError
from mlxchat.session.summary_prompt import summary_request, summary_text
from mlxchat.store import SessionStore

log = logging.getLogger(__name__)


@dataclass
class Preparation:
    """A compaction being prepared for the branch its plan holds for."""

    plan: CompactPlan
    key: str
    """The token ledger's key it was planned under (a new one voids it)."""
    prompt: list[int]
    max_tokens: int
    stops: list[int]
    written: list[int] = field(default_factory=list)
    summary: str | None = None
    """The summary, once written."""
    summary_tokens: int = 0
    held: int = 0
    """Tokens of the compacted conversation the second cache holds..."""
    wanted: int = 0
    """...of those it has now (0 until the summary is written)."""
    seconds: float = 0.0
    """Engine time the preparation took so far."""
    messages: int = 0
    """The branch's length when ``wanted`` was counted."""
    indexed: bool = False
    """What it summarizes was indexed for recall."""

    @property
    def ready(self) -> bool:
        return self.summary is not None and self.wanted > 0 and self.held >= self.wanted


@dataclass(frozen=True)
class CompactStatus:
    """What the gauges and ``/context`` say of the compaction."""

    policy: str
    threshold: int
    """Tokens past which a compaction is prepared (0: never, another policy)."""
    state: str
    """'off', 'waiting' (below the threshold, or until the next turn ends),
    'preparing', 'ready' or 'unavailable'."""
    detail: str = ""
    summary_tokens: int = 0

    def words(self) -> str:
        """What the gauge says: 'ready (a 380-token summary)', 'preparing', ..."""
        if self.state == "ready":
            return f"ready (a {self.summary_tokens:,}-token summary)"
        if self.state == "preparing" and self.summary_tokens:
            return f"preparing (summary written: {self.summary_tokens:,} tokens)"
        if self.state == "unavailable":
            return f"unavailable: {self.detail}"
        return "" if self.state in ("off", "waiting") else self.state


@dataclass(frozen=True)
class Switched:
    """A compaction switched to: the record stored and how much was prepared."""

    compaction: Compaction
    held: int
    """Tokens of the compacted conversation the live cache holds after the switch."""
    tokens: int

    def note(self, *, ahead: bool, written: int = 0) -> str:
        """``ahead``: its summary was written before the turn; ``written``: else,
        the summary's tokens written ahead (0: nothing was prepared)."""
        words = f"compacted: {self.compaction.headline()}"
        if written:
            return words + f" (its summary finished in this turn: {written:,} of its " \
                "tokens were written ahead)"
        if not ahead:
            return words + " (prepared in this turn)"
        if self.held >= self.tokens:
            return words + " (prepared ahead)"
        return words + f" (this turn prefilled the {self.tokens - self.held:,} tokens " \
            "not prepared yet)"


class Compactor:
    """The open branch's compaction: ``conv.compactor``."""

    def __init__(self, open_session: OpenSession, store: SessionStore, engine: Engine, *,
                 cache: CacheKeeper, recall: Recall):
        self._open, self._store, self._engine, self._cache = open_session, store, engine, cache
        self._recall = recall
        """Indexes what the summary will stand for, while it is prepared."""
        self.ahead = True
        """Prepare in idle time after turns; False (``mlxchat ask``, with no idle
        time): a message that overflows waits while it is prepared, always."""
        self.on_change: Callable[[], None] = lambda: None
        """Called (from the preparing thread) when the preparation moves on."""
        self._prep: Preparation | None = None
        self._why_not = ""
        self._lock = threading.RLock()
        self._halt = threading.Event()
        self._handoff = threading.Lock()
        """Guards starting and ending the preparing thread."""
        self._thread: threading.Thread | None = None
        self._again = False

    # -- what it says --------------------------------------------------------------------
    def threshold(self) -> int:
        settings = self._open.generation
        return self._engine.prompts.window(settings) * settings.compact_at // 100

    def _used(self) -> int:
        return self._open.ledger(self._engine).used(self._open.messages) or 0

    def status(self) -> CompactStatus:
        settings = self._open.generation
        if settings.context_policy != "compact":
            return CompactStatus(settings.context_policy, 0, "off")
        prep, threshold, branch = self._prep, self.threshold(), self._open.messages
        tokens = prep.summary_tokens if prep is not None else 0
        if self._thread is not None:
            return CompactStatus("compact", threshold, "preparing", summary_tokens=tokens)
        if (prep is not None and prep.plan.holds_for(branch) and prep.ready
                and prep.messages == len(branch)):
            return CompactStatus("compact", threshold, "ready", summary_tokens=tokens)
        if self._why_not:
            return CompactStatus("compact", threshold, "unavailable", self._why_not)
        return CompactStatus("compact", threshold, "waiting")

    # -- idle time -------------------------------------------------------------------------
    def due(self) -> bool:
        settings = self._open.generation
        return (settings.context_policy == "compact" and settings.history == "ledger"
                and not self._engine.segments_per_rank and self._used() >= self.threshold())

    def after_turn(self) -> None:
        """A turn ended: prepare in the background when the branch is past the threshold."""
        self._halt.clear()
        if not self.ahead or not self.due():
            return
        with self._handoff:
            self._again = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="mlxchat-compaction",
                                                daemon=True)
                self._thread.start()

    def pause(self) -> None:
        """A turn or a command goes first: the preparation stops within a chunk
        or a token (what it computed is kept) until the next ``after_turn``."""
        self._halt.set()
        self._engine.prepared.supersede()

    def _loop(self) -> None:
        try:
            while True:
                with self._handoff:  # a turn that ended meanwhile asks for another round
                    if not self._again or self._halt.is_set():
                        return
                    self._again = False
                while not self._halt.is_set() and not self.step():
                    pass
        except MlxchatError as exc:  # a closed engine, a refusal: say why in the gauge
            self._why_not = str(exc)
            log.info("compaction not prepared: %s", exc)
        except Exception:  # a bug: the conversation goes on without it
            self._why_not = "its preparation failed (the log says why)"
            log.exception("compaction preparation failed")
        finally:
            with self._handoff:
                if self._thread is threading.current_thread():
                    self._thread = None
            self.on_change()

    def step(self) -> bool:
        """One engine job of the preparation; True when there is nothing left to do."""
        with self._lock:
            prep = self._current()
            if prep is None:
                return True
            t0 = time.perf_counter()
            try:
                if prep.summary is None:
                    self._write(prep)
                else:
                    self._prefill(prep)
            finally:
                prep.seconds += time.perf_counter() - t0
            self.on_change()
            if self._prep is not prep:
                return True  # it could not be: nothing more to do for this branch
        if not prep.indexed:  # outside the lock: a message sent meanwhile never waits for it
            prep.indexed = True
            self._recall.index(prep.plan.messages)
        return prep.ready

    def _current(self) -> Preparation | None:
        """The preparation for the branch as it is now, planned anew when the
        branch or its ledger changed (None: there is nothing to compact)."""
        branch = self._open.messages
        ledger = self._open.ledger(self._engine)
        prep = self._prep
        if prep is not None and prep.key == ledger.key and prep.plan.holds_for(branch):
            return prep
        if prep is not None:
            self._engine.prepared.drop()
        self._prep, self._why_not = None, ""
        settings = self._open.generation
        window = self._engine.prompts.window(settings)
        tokenizer = self._engine.loaded.tokenizer

        def count(m: Message) -> int:  # a history an API client sent has no ids yet
            return len(m.token_ids) if m.token_ids is not None else len(
                tokenizer.encode(m.content, add_special_tokens=False))
        plan = plan_compaction(branch, window=window, count=count)
        if isinstance(plan, str):
            self._why_not = plan
            return None
        request = summary_request(plan.messages, earlier=plan.earlier, window=window, count=lambda
                                  text: len(tokenizer.encode(text, add_special_tokens=False)))
        prompt = self._engine.prompts.message_ids(
            request.text, system=self._open.session.context_system, previous=None,
            options=dataclasses.replace(ledger.options, enable_thinking=False))
        if len(prompt) + request.max_tokens > window:
            self._why_not = "the system part leaves no room in the window to write a summary"
            return None
        self._prep = Preparation(plan, ledger.key, prompt, request.max_tokens,
                                 list(tokenizer.eos_token_ids))
        return self._prep

    def _write(self, prep: Preparation) -> None:
        written = self._engine.prepared.write(prep.prompt, max_tokens=prep.max_tokens,
                                              stops=prep.stops)
        prep.written = written.ids
        if not written.done:
            return
        text = summary_text(self._engine.loaded.tokenizer, prep.prompt, written.ids, prep.stops)
        if not text:
            text = "(The model wrote no summary of the earlier conversation.)"
        prep.summary = text
        prep.summary_tokens = len(self._engine.loaded.tokenizer.encode(
            text, add_special_tokens=False))

    def _compacted_ids(self, prep: Preparation) -> list[int] | None:
        assert prep.summary is not None
        return self._open.ledger(self._engine).compacted(self._open.messages, prep.plan.first,
                                                         prep.summary)

    def _prefill(self, prep: Preparation) -> None:
        ids = self._compacted_ids(prep)
        if ids is None:
            self._prep, self._why_not = None, "the branch's token ledger cannot be compacted"
            return
        prep.wanted, prep.messages = len(ids), len(self._open.messages)
        prep.held = self._engine.prepared.extend(ids)

    # -- switching ---------------------------------------------------------------------------
    def at_overflow(self) -> tuple[Switched | None, str]:
        """A message does not fit: switch to the compaction, finishing in this
        turn whatever of it was not prepared yet (its summary, where it was
        still being written, or all of it where nothing was prepared for this
        branch: a message that jumped past the threshold and the window at
        once, a new API conversation, ``mlxchat ask``). Waiting costs at most
        the rest of a summary and about a fifth of the window prefilled; the
        fallback would prefill nearly the whole window again. The switch, or
        None and why the oldest messages are left out instead."""
        self.pause()
        with self._lock:
            prep = self._prep
            if prep is not None and not (prep.plan.holds_for(self._open.messages)
                                         and prep.key == self._open.ledger(self._engine).key):
                prep = None  # planned for another branch: nothing was prepared for this one
            ahead = prep is not None and self.ahead and prep.summary is not None
            written = len(prep.written) if prep is not None and prep.summary is None else 0
            if not ahead:
                self._finish_now()
            prep = self._current()
            if prep is None or prep.summary is None:
                return None, f"no compaction ({self._why_not or 'nothing to summarize'})"
            switched = self._switch(prep, "auto")
            if switched is None:
                return None, f"no compaction ({self._why_not})"
            return switched, switched.note(ahead=ahead, written=written)

    def _finish_now(self) -> None:
        self._halt.clear()
        while not self.step():
            pass
        self._halt.set()

    def _switch(self, prep: Preparation, trigger: str) -> Switched | None:
        branch = self._open.messages
        ids = self._compacted_ids(prep)
        if ids is None or prep.summary is None:
            self._why_not = "the branch's token ledger cannot be compacted"
            return None
        first = prep.plan.first
        record = Compaction(kept=len(branch) - first, summarized=prep.plan.summarized,
                            summary_tokens=prep.summary_tokens, trigger=trigger,
                            tokens_before=self._used(), tokens_after=len(ids),
                            prepared_s=round(prep.seconds, 3))
        ledger = self._open.ledger(self._engine)
        self._store.add_messages(self._open.stored_id(), [Message(
            "summary", prep.summary, token_ids=ids, ledger_key=ledger.key, ledger_start=True,
            compaction=record)])
        self._open.reload()
        self._prep = None
        held = self._engine.prepared.adopt(ids)
        return Switched(record, held, len(ids))

    # -- by hand ------------------------------------------------------------------------------
    def compact(self) -> Switched:
        """``/compact``: prepare now (what was prepared ahead is used) and switch;
        the compacted conversation's KV is saved under the summary at once.
        ConversationError when there is nothing to compact; nothing changes then."""
        if self._open.generation.history != "ledger":
            raise ConversationError("Compaction needs the token ledger (/set history ledger).")
        self.pause()
        with self._lock:
            try:
                self._finish_now()
            except EngineError as exc:
                raise ConversationError(f"Cannot compact here: {exc}") from None
            prep = self._current()
            switched = self._switch(prep, "manual") if prep is not None else None
        if switched is None:
            raise ConversationError(f"Nothing to compact: {self._why_not or 'no summary'}.")
        self._cache.save()
        self.on_change()
        return switched

    def undo(self) -> tuple[Compaction, int]:
        """``/compact undo``: the branch goes back before its newest summary,
        exactly as it was (its KV restored from its files). The summary's record
        and how many messages sent since stay on the compacted branch."""
        branch = self._open.messages
        at = latest_summary(branch)
        if at is None:
            raise ConversationError("This branch has not been compacted: nothing to undo.")
        self.pause()
        marker = branch[at]
        self._store.branches.set_leaf(self._open.stored_id(), marker.parent_id)
        self._open.reload()
        self.forget()
        self._cache.restore()
        assert marker.compaction is not None
        return marker.compaction, len(branch) - at - 1

    def forget(self) -> None:
        """The session, its model or its ledger changed: nothing prepared holds."""
        self.pause()
        with self._lock:
            self._prep, self._why_not = None, ""
        self._engine.prepared.drop()
