"""The open session's turns: a message (or tool results) planned against the
token ledger and committed, the engine's events streamed to the caller, the
reply checkpointed while it streams, then stored, then its KV segment written.

Durability order: the user message is committed before the turn starts; the
reply is committed when it finishes or is cancelled; then the KV segment is
written and recorded.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from mlxchat.chat import Attachment, ImageRef, Message
from mlxchat.engine.events import Event, Preparing, TextDelta, TurnDone
from mlxchat.engine.interface import Engine
from mlxchat.engine.turn.constrained import CompiledFormat, OutputFormat, compile_format
from mlxchat.engine.turn.early_images import done_encoding
from mlxchat.engine.turn.reply_options import ASKS_NOTHING, ReplyOptions
from mlxchat.models.vision import images as vision_images
from mlxchat.session.cache_keeper import CacheKeeper
from mlxchat.session.compactor import Compactor
from mlxchat.session.current import OpenSession
from mlxchat.session.errors import ConversationError
from mlxchat.session.ledger import Ledger, Plan
from mlxchat.session.pending import PendingReply, UnsavedReplies
from mlxchat.session.pins import PinnedDocs
from mlxchat.session.recall import RECALLED, Recall
from mlxchat.session.retrieval import Retrieval
from mlxchat.session.window_fit import fit_window
from mlxchat.sources import Source, with_sources, without_sources
from mlxchat.store import SessionStore, StoreError, StoreLocked
from mlxchat.store.image_files import store_image
from mlxchat.turn_stats import TurnStats

log = logging.getLogger(__name__)

#: Seconds between checkpoints of a streaming reply (what a kill can lose at most).
DRAFT_INTERVAL_S = 1.0
#: A checkpoint waits at most this long for another process's lock: never stalls the stream.
DRAFT_WAIT_S = 0.05
#: How long the finished reply waits for the lock before it is retried in the background.
FIRST_SAVE_WAIT_S = 0.5


@dataclass(frozen=True)
class NextReply:
    """What a send was asked for its reply (``TurnRunner.output``, ``options``, ``prefill``)."""

    output: CompiledFormat | None
    options: ReplyOptions
    prefill: str | None


class TurnRunner:
    """Plans, commits and runs the open session's turns on the engine, and
    keeps what they said. ``attachments`` go in front of the next message."""

    def __init__(self, open_session: OpenSession, store: SessionStore, engine: Engine, *,
                 cache: CacheKeeper, pins: PinnedDocs, unsaved: UnsavedReplies,
                 retrieval: Retrieval, attachments: list[Attachment], compactor: Compactor,
                 recall: Recall, also_cancel: Callable[[], None] = lambda: None):
        self._open = open_session
        self._store = store
        self._engine = engine
        self._cache = cache
        self._compactor = compactor
        self._recall = recall
        self._compaction_note: str | None = None
        """What the window did for the turn being planned (``TurnStats.compaction``)."""
        self.switched: Message | None = None
        """The summary the last message sent switched to (None: it did not)."""
        self._pins = pins
        self._unsaved = unsaved
        self._retrieval = retrieval
        self.attachments = attachments
        self.images: list[ImageRef] = []
        """Stored images (``store_image``) that go with the next message, in order."""
        self.encoding: Future = done_encoding()
        """The engine's encoding of the images above (``EarlyImages.hold``), the latest."""
        self.output: CompiledFormat | None = None
        """The schema the next reply follows (taken by the next send; None: free text)."""
        self.options = ASKS_NOTHING
        """The next reply's biases, penalties, log-probabilities and choices (taken
        by the next send)."""
        self.prefill: str | None = None
        """Text the next reply begins with, which the model continues (taken by
        the next send): stored as the start of the reply, its ids in the ledger."""
        self._also_cancel = also_cancel
        """Stops what a turn's tool loop waits on (a call, the consent dialog)."""
        self.started = 0
        """Turns started: a typing prefill planned before one is stale."""
        self.last_stats: TurnStats | None = None
        """What the last turn measured (None until one ran in this session)."""

    # -- a turn asked for ------------------------------------------------------------------
    def follow_schema(self, fmt: OutputFormat) -> None:
        """The next reply follows ``fmt``, compiled for the model loaded now
        (SchemaError, one line, when it cannot be)."""
        self.output = compile_format(self._engine.loaded.tokenizer, fmt)

    def compose(self, text: str) -> str:
        """The user's text with any pending attachments in front."""
        return "\n\n".join([a.block for a in self.attachments] + [text])

    def add_image(self, path: Path, *, room: int | None = None) -> tuple[ImageRef, int]:
        """Check the image at ``path`` (decoded once: one line when it cannot be
        shown, the model sees none, or it takes more than ``room`` tokens),
        keep its bytes by their hash and put it with the next message; it and
        the tokens it takes. Nothing is kept when a check fails."""
        header = vision_images.check(path)
        probe = ImageRef(digest=vision_images.file_digest(path), path=str(path),
                         name=path.name, width=header.width, height=header.height)
        if any(r.digest == probe.digest for r in self.images):
            raise ConversationError(f"{path.name} goes with the next message already.")
        tokens = self._engine.prompts.image_tokens(probe)
        if room is not None and tokens > room:
            raise ConversationError(f"{path.name} takes {tokens:,} tokens; only {room:,} are "
                                    "left in the context window.")
        ref = store_image(path, width=header.width, height=header.height)
        self.images.append(ref)
        self.encode_images()
        return ref, tokens

    def encode_images(self) -> Future:
        """Have the engine run the vision tower now for the images going with
        the next message (none: forget what it holds for them), while the
        question is typed; the turn finds their features ready."""
        self.encoding = self._engine.images.hold(list(self.images), self._open.generation)
        return self.encoding

    def send(self, text: str) -> Iterator[Event]:
        """Commit the user message (with what it retrieved from the session's
        collection in front: ``retrieval.last``), then run the turn; yields the
        engine's events. Nothing is prefilled until the first event is asked for."""
        asked = self._take_asks()
        self._unsaved.require_saved()
        if not text.strip():
            raise ConversationError("Nothing to send.")
        content, sources = self._with_retrieved(text, self.compose(text))
        images = tuple(self.images)
        plan = self._ledger().opened(self._fitting(lambda branch: self._ledger().plan_message(
            branch, content, images=images, fresh=not branch)), asked.prefill)
        self._add_user(content, plan, sources, images)  # the plan refused what cannot fit
        self.attachments.clear()
        self.images.clear()
        return self.run(plan, asked.output, asked.options)

    def send_results(self, results: list[Message]) -> Iterator[Event]:
        """Commit tool results (role ``tool``, then perhaps a user message and
        system messages) after the last reply, then run the turn that reads
        them; the first holds the ids they add together."""
        asked = self._take_asks()
        self._unsaved.require_saved()
        tools = next((i for i, r in enumerate(results) if r.role != "tool"), len(results))
        if not tools or any(r.role not in ("user", "system") for r in results[tools:]):
            raise ConversationError("Tool results need at least one message of role 'tool'.")
        self._recall.last = []  # results bring nothing back: none said of the message before
        plan = self._ledger().opened(self._fitting(
            lambda branch: self._ledger().plan_results(branch, results)), asked.prefill)
        return self._commit_and_run(results, plan, asked)

    def send_turn(self, messages: list[Message]) -> Iterator[Event]:
        """Commit a turn of several messages (a user message and system messages
        that stand beside it, in order, each with its stored images) after the
        last reply, then run it; the first holds the ids they add together."""
        asked = self._take_asks()
        self._unsaved.require_saved()
        if not messages or any(m.role not in ("user", "system") for m in messages):
            raise ConversationError("A turn is user and system messages.")
        self._recall.last = []
        plan = self._ledger().opened(self._fitting(
            lambda branch: self._ledger().plan_turn(branch, messages)), asked.prefill)
        return self._commit_and_run(messages, plan, asked)

    def _commit_and_run(self, messages: list[Message], plan: Plan,
                        asked: NextReply) -> Iterator[Event]:
        self._store.add_messages(self._open.id, [  # all or none
            Message(r.role, r.content, token_ids=plan.user_ids if i == 0 or plan.user_ids is None
                    else [], ledger_key=plan.key, ledger_start=plan.start and i == 0,
                    tool_call_id=r.tool_call_id, tool_name=r.tool_name, tool_run=r.tool_run,
                    images=r.images)
            for i, r in enumerate(messages)])
        self._open.reload()
        return self.run(plan, asked.output, asked.options)

    def retry(self) -> Iterator[Event]:
        """Answer the last user message again, as a new branch beside the old reply."""
        self._unsaved.require_saved()
        messages = self._open.messages
        if not messages:
            raise ConversationError("Nothing to retry yet.")
        if messages[-1].role == "assistant":
            self._store.branches.set_leaf(self._open.id, messages[-1].parent_id)
            messages = self._open.reload().messages
        if not messages or messages[-1].role not in ("user", "tool"):
            raise ConversationError("The conversation does not end with a message to answer.")
        plan = self._ledger().plan_existing(messages)
        last = messages[-1]
        if plan.user_ids is not None and last.id is not None and plan.key is not None:
            self._store.set_message_ledger(last.id, plan.user_ids, plan.key, start=plan.start)
            self._open.reload()
        return self.run(plan)

    def edit_last(self, text: str) -> Iterator[Event]:
        """Replace the last user message with ``text`` on a new branch and answer it."""
        self._unsaved.require_saved()
        last = self.last_user_message()
        if last is None:
            raise ConversationError("There is no message to edit yet.")
        text = without_sources(text)  # an edit of a message that retrieved retrieves anew
        if not text.strip():
            raise ConversationError("The edited message is empty.")
        content, sources = self._with_retrieved(text, text)
        # Planned (and refused when it cannot fit) before anything is committed.
        messages = self._open.messages
        plan = self._ledger().plan_message(messages[:messages.index(last)], content,
                                           images=last.images)  # an edit keeps its images
        self._store.branches.set_leaf(self._open.id, last.parent_id)
        self._add_user(content, plan, sources, last.images)
        return self.run(plan)

    def undo(self) -> int:
        """Step back before the last user message (kept on its branch); returns
        how many messages left the current branch."""
        self._unsaved.require_saved()
        last = self.last_user_message()
        if last is None:
            raise ConversationError("Nothing to undo.")
        before = len(self._open.messages)
        self._store.branches.set_leaf(self._open.id, last.parent_id)
        return before - len(self._open.reload().messages)

    def last_user_message(self) -> Message | None:
        return next((m for m in reversed(self._open.messages) if m.role == "user"), None)

    def last_user_text(self) -> str | None:
        """What the user typed in the last message, its sources taken off:
        what an edit starts from."""
        last = self.last_user_message()
        return None if last is None else without_sources(last.content)

    def cancel(self) -> None:
        """Stop the running turn (and any queued one) within about a token or a chunk,
        and a tool call or a consent dialog its loop waits on."""
        self._engine.cancel()
        self._also_cancel()

    def _ledger(self) -> Ledger:
        return self._open.ledger(self._engine)

    def _fitting(self, plan_for: Callable[[list[Message]], Plan]) -> Plan:
        """The plan for new messages after the branch, compacted where they
        overflow the window (``window_fit``); what the window did is kept for
        the turn's figures."""
        self._compactor.pause()  # the turn goes first
        fitted = fit_window(plan_for, self._open, self._compactor)
        self._compaction_note, self.switched = fitted.note, fitted.switched
        return fitted.plan

    def _take_asks(self) -> NextReply:
        """What was asked of the next reply, taken (the one after asks nothing)."""
        asked = NextReply(self.output, self.options, self.prefill or None)
        self.output, self.options, self.prefill = None, ASKS_NOTHING, None
        return asked

    def _with_retrieved(self, query: str, content: str) -> tuple[str, list[Source] | None]:
        """``content`` with what it retrieved from the session's collection and
        what it recalled of the conversation's earlier messages in front."""
        self._retrieval.last = None
        found = self._retrieval.retrieve(query, message=content)
        sources: list[Source] = []
        if found is not None and found.sources:
            content, sources = with_sources(found.collection, found.sources, content), \
                list(found.sources)
        recalled = self._recall.recall(query, first=len(sources) + 1)
        if recalled:
            content, sources = with_sources(RECALLED, recalled, content), sources + recalled
        return content, sources or None

    def _add_user(self, content: str, plan: Plan, sources: list[Source] | None = None,
                  images: tuple[ImageRef, ...] = ()) -> None:
        self._store.add_messages(self._open.id, [Message(
            "user", content, token_ids=plan.user_ids, ledger_key=plan.key,
            ledger_start=plan.start, sources=sources, images=images)])
        self._open.reload()

    # -- a turn running ----------------------------------------------------------------------
    def run(self, plan: Plan, output: CompiledFormat | None = None,
            options: ReplyOptions = ASKS_NOTHING) -> Iterator[Event]:
        """Yield the engine's events for ``plan``; the reply is stored at the end,
        or what was shown of it when the engine fails mid-reply. ``output``:
        the schema the reply follows; ``options``: what else the request asks
        of it (only choice 0 is the conversation's)."""
        done: TurnDone | None = None
        parent = self._open.session.leaf_id
        pieces: list[str] = [plan.prefill.text] if plan.prefill else []
        thought: list[str] = []
        saved_at = time.monotonic()
        self.started += 1
        self._compactor.pause()
        self._engine.supersede_typing()  # before any engine job: a send goes first
        try:
            if (self._engine.needs_restore(plan.prompt.tokens)
                    or self._cache.worth_restoring(plan.prompt.tokens)):
                # A wrapped window or recurrent state cannot be trimmed back, or the
                # live cache holds another branch: take this branch's state at its
                # last saved turn from disk instead.
                yield Preparing("restoring this branch's KV cache from disk")
                self._cache.restore()
            self._pins.prepare(plan.prompt.tokens)
            for event in self._engine.turn(plan.prompt, self._open.generation, output=output,
                                           options=options):
                kept = isinstance(event, TextDelta) and event.choice == 0
                if isinstance(event, TurnDone):
                    done = event
                elif kept:
                    (pieces if event.part == "answer" else thought).append(event.text)
                yield event
                # Checkpointed once the caller has taken the text (shown it): a
                # kill between the two never leaves a draft holding unshown text.
                if kept and time.monotonic() - saved_at >= DRAFT_INTERVAL_S:
                    saved_at = time.monotonic()
                    self._checkpoint(parent, "".join(pieces), "".join(thought))
        finally:
            self._pins.keep(done.stats if done is not None else None)
            if done is not None:
                done.stats.compaction, self._compaction_note = self._compaction_note, None
                self._finish(plan.prefill.joined(done) if plan.prefill else done, plan.key)
            elif pieces or thought:
                # The engine failed mid-reply: keep what was shown, marked stopped.
                self._store.add_message(self._open.id, "assistant", "".join(pieces),
                                        cancelled=True,
                                        reasoning="".join(thought).rstrip() or None)
                self._open.reload()
            self._compactor.after_turn()  # idle now: what the window will need is prepared

    def _checkpoint(self, parent: int | None, text: str, reasoning: str = "") -> None:
        try:
            with self._store.patience(DRAFT_WAIT_S):
                self._store.drafts.save(self._open.id, parent, text, reasoning.rstrip())
        except StoreError as exc:  # a full disk or a locked database must not stop the reply
            log.warning("reply checkpoint not saved: %s", exc)

    def _finish(self, done: TurnDone, key: str | None) -> None:
        stats = done.stats
        self.last_stats = stats
        cancelled = stats.finish_reason == "cancelled"
        if done.reply or done.reasoning or not cancelled:
            # The reply's ledger entry is what was sampled, reasoning and end token included.
            session = self._open.session
            reply = PendingReply(session.id, session.leaf_id, done.reply,
                                 stats=stats.to_dict(), cancelled=cancelled,
                                 token_ids=done.token_ids if key else None, ledger_key=key,
                                 reasoning=done.reasoning or None)
            try:
                reply.store_in(self._store, wait_s=FIRST_SAVE_WAIT_S)
            except StoreLocked:
                # Shown already: keep it and retry until the other process lets go;
                # stored, it says it was late.
                stats.save_warning = ("reply not saved yet: the session database is locked "
                                      "by another process; retrying")
                reply.stats["save_warning"] = ("stored late: the session database was locked "
                                               "by another process")
                self._unsaved.keep(reply)
                return
        stored = self._open.session.leaf_id != self._open.reload().leaf_id
        self._cache.save(stats)
        if stored and stats.snapshot_warning and self._open.session.leaf_id is not None:
            self._keep_warning(self._open.session.leaf_id, stats)

    def _keep_warning(self, reply_id: int, stats: TurnStats) -> None:
        """The segment failed after the reply was stored: say so with the reply,
        so a reopened session still shows why it recomputes."""
        try:
            self._store.set_message_stats(reply_id, stats)
        except StoreError as exc:
            log.warning("reply figures not updated: %s", exc)
