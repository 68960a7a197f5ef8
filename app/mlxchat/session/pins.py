"""Pinned documents of the open session, and the KV prefix they share.

A pinned document goes into the system part, after the system prompt, so the
system part renders as an exact token prefix of every first message (also in
templates that fold the system text into the first user turn). Its KV is
computed once and kept in a content-addressed file (model, template, KV bit
width and the prefix's token ids make the key); a session pinning the same
documents under the same system prompt and model loads that file instead of
prefilling it. Pinning or unpinning starts a new token ledger ("pinned
documents changed"); no message is touched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mlxchat import paths
from mlxchat.chat import Message, Pin, pinned_system
from mlxchat.engine.disk.segments import SegmentRef
from mlxchat.engine.interface import Engine
from mlxchat.engine.kv.reuse import common_prefix
from mlxchat.errors import MlxchatError
from mlxchat.files import remove_files
from mlxchat.session.current import OpenSession
from mlxchat.session.ledger import options_for
from mlxchat.session.pending import UnsavedReplies
from mlxchat.store import PinUse, PrefixRecord, SessionStore, kv_names
from mlxchat.turn_stats import TurnStats

log = logging.getLogger(__name__)

# Two first messages that start differently: their renders share exactly the system part.
_STUBS = ("Stub question for the pinned prefix.", "? 2")


class PinError(MlxchatError):
    """A pin or unpin that cannot be done; nothing was changed."""


@dataclass
class PinView:
    """A row of ``/pins``."""

    name: str
    path: str
    tokens: int
    sessions: list[PinUse]
    """Sessions pinning the same text (this one included)."""
    stored: bool
    """The session's pinned prefix is in the prefix store."""


@dataclass
class PrefixUse:
    """What the last turn (or typing prefill) did with the pinned prefix."""

    tokens: int
    how: str
    """'loaded' from the store, 'live' (the cache held it), 'computed', or 'none'."""
    reason: str | None = None


def prefix_key(fingerprint: str, template_hash: str, kv_bits: int | None,
               ids: Sequence[int]) -> str:
    digest = hashlib.sha256(f"{fingerprint}\0{template_hash}\0{kv_bits}\0".encode())
    digest.update(array("q", ids).tobytes())
    return digest.hexdigest()[:32]


class PinnedDocs:
    """The open session's pinned documents and the stored KV of their prefix."""

    def __init__(self, open_session: OpenSession, store: SessionStore, engine: Engine, *,
                 unsaved: UnsavedReplies):
        self._open = open_session
        self._unsaved = unsaved
        """Nothing is pinned or unpinned while a reply waits to be stored."""
        self._store = store
        self._engine = engine
        self.last_prefix: PrefixUse | None = None
        """What the last turn (or typing prefill) did with the pinned prefix."""
        self._prefix_memo: tuple[tuple, list[int]] | None = None
        self._prefix_marked = False
        """The engine was asked to keep a prefix (so there may be one to record)."""
        self._known_stored: str | None = None
        """The prefix key this conversation last found in (or wrote to) the store."""

    def forget(self) -> None:
        """Another session is open: what the last turn did is not its."""
        self.last_prefix = None

    # -- the prefix ----------------------------------------------------------------------
    def _prefix_for(self, system: str | None) -> list[int]:
        options = options_for(self._open.session, self._open.generation,
                              tools=self._open.call_tools)
        memo = (self._engine.info.fingerprint, self._engine.info.chat_template_hash, system,
                options)
        if self._prefix_memo is not None and self._prefix_memo[0] == memo:
            return self._prefix_memo[1]
        a, b = (self._engine.prompts.message_ids(stub, system=system, previous=None, options=options)
                for stub in _STUBS)
        ids = a[:common_prefix(a, b)]
        self._prefix_memo = (memo, ids)
        return ids

    def prefix_tokens(self) -> list[int]:
        """The token ids of the session's system part with its pinned documents
        (what every first message starts with); [] without pins."""
        session = self._open.session
        return self._prefix_for(session.context_system) if session.pins else []

    def system_tokens(self) -> list[int]:
        """The token ids of the session's system part (prompt and pinned
        documents) at the start of a first message; [] without one."""
        system = self._open.session.context_system
        return self._prefix_for(system) if system else []

    def pinned_in_cache(self) -> int:
        """Tokens of the pinned prefix the live cache holds (for the context gauge)."""
        ids = self.prefix_tokens()
        return len(ids) if ids and self._engine.cached_tokens[:len(ids)] == ids else 0

    def _key(self, ids: Sequence[int], kv_bits: int | None) -> str:
        info = self._engine.info
        return prefix_key(info.fingerprint, info.chat_template_hash, kv_bits, ids)

    # -- pin, unpin, list ------------------------------------------------------------------
    def pin(self, path: Path, text: str) -> Pin:
        """Pin ``text`` (read from ``path``) after the system prompt and the
        documents pinned already; PinError when it is there already or does not fit."""
        self._unsaved.require_saved()
        name = path.name or str(path)
        session, settings, messages = self._open.session, self._open.generation, self._open.messages
        if any(p.name == name or p.text == text for p in session.pins):
            raise PinError(f"{name} is pinned already; /unpin {name} removes it.")
        now = self._prefix_for(session.context_system)
        pin = Pin(name=name, path=str(path), text=text)
        system = pinned_system(session.system_prompt, [*session.pins, pin])
        ids = self._prefix_for(system)
        tokens = len(ids) - len(now)
        window = self._engine.prompts.window(settings)
        used = (self._engine.prompts.count_tokens([Message("system", system or ""), *messages])
                if messages else len(ids))
        room = window - self._engine.prompts.reply_reserve(settings)
        if used > room:
            left = room - (used - tokens)
            raise PinError(f"{name} is {tokens:,} tokens; only {max(left, 0):,} are left in the "
                           f"{window:,}-token window (after room for a reply).")
        pin = dataclasses.replace(pin, tokens=tokens)
        self._store_pins([*session.pins, pin], ids)
        return pin

    def unpin(self, name: str) -> list[Pin]:
        """Unpin the document called ``name`` ('all': every one); returns those removed."""
        self._unsaved.require_saved()
        pins = self._open.session.pins
        if not pins:
            raise PinError("Nothing is pinned in this session (/pin FILE pins a document).")
        gone = list(pins) if name == "all" else [p for p in pins if p.name == name]
        if not gone:
            pinned = ", ".join(p.name for p in pins) or "none"
            raise PinError(f"No pinned document is called {name!r} (pinned: {pinned}).")
        kept = [p for p in pins if p not in gone]
        system = pinned_system(self._open.session.system_prompt, kept)
        self._store_pins(kept, self._prefix_for(system) if kept else [])
        return gone

    def _store_pins(self, pins: list[Pin], ids: list[int]) -> None:
        key = self._key(ids, self._open.generation.kv_bits) if pins else None
        pins = [dataclasses.replace(p, prefix_key=key) for p in pins]
        session, files = self._store.pins.replace(self._open.stored_id(), pins)
        remove_files(files)
        self._known_stored = None  # the files of unused prefixes may just have gone
        self._open.session = session

    def list(self) -> list[PinView]:
        """The session's pinned documents with their cost and who else pins them."""
        pins = self._open.session.pins
        if not pins:
            return []
        record = self._store.prefixes.get(pins[0].prefix_key or "")
        stored = record is not None and record.file() is not None
        return [PinView(p.name, p.path, p.tokens, self._store.pins.sessions_pinning(p.text_hash),
                        stored) for p in pins]

    # -- around a prefill --------------------------------------------------------------------
    def prepare(self, tokens: Sequence[int]) -> None:
        """Before a prefill toward ``tokens``: load the pinned prefix from the store
        when the live cache lacks it, or mark it to be kept once computed."""
        ids = self.prefix_tokens()
        n = len(ids)
        if not ids or n >= len(tokens) or list(tokens[:n]) != ids:
            self._mark(None)
            self.last_prefix = (PrefixUse(n, "none", "the prompt does not start with the "
                                                      "pinned documents") if ids else None)
            return
        key = self._key(ids, self._open.generation.kv_bits)
        if any(p.prefix_key != key for p in self._open.session.pins):  # another model or KV width
            self._store_pins(self._open.session.pins, ids)
        live = common_prefix(self._engine.cached_tokens, tokens) >= n
        if live and self._known_stored == key:
            # A follow-up (or a typed word) on a cache that holds the stored
            # prefix: no store read, no file check.
            self.last_prefix = PrefixUse(n, "live")
            self._mark(None)
            return
        record = self._store.prefixes.get(key)
        file = record.file() if record else None
        stored = record is not None and file is not None and record.token_ids == ids
        if live:
            self.last_prefix = PrefixUse(n, "live")
        elif stored:
            assert record is not None and file is not None
            load = self._engine.load_segments(
                [SegmentRef(file, 0, n, record.checksum, ids)],
                conversation=[Message("system", self._open.session.context_system or "")])
            if load.ok and load.tokens == n and load.reason is None:
                self.last_prefix = PrefixUse(n, "loaded")
            else:
                stored = False
                self.last_prefix = PrefixUse(n, "computed", f"pinned prefix not used "
                                                            f"({load.reason}); recomputed")
                log.warning(self.last_prefix.reason)
        else:
            self.last_prefix = PrefixUse(n, "computed")
        self._known_stored = key if stored else None
        if stored:
            self._mark(None)
            return
        folder = paths.ensure_private_dir(paths.kv_dir())
        self._mark(ids, folder / kv_names.prefix(self._store.segments.file_tag(), key))

    def _mark(self, ids: list[int] | None, path: Path | None = None) -> None:
        if ids is None and not self._prefix_marked:
            return  # nothing to forget: no engine job (typing prefill stays cheap)
        self._engine.mark_prefix(ids, path)
        self._prefix_marked = ids is not None

    def keep(self, stats: TurnStats | None = None) -> None:
        """After a prefill: record a prefix the engine wrote (or say why it did not,
        on the turn's ``stats``)."""
        if not self._prefix_marked:
            return
        saved = self._engine.take_prefix()
        if saved is None:
            return
        self._prefix_marked = False
        if saved.info is None:
            log.warning(saved.warning)
            if stats is not None:
                stats.snapshot_warning = saved.warning
            return
        info = saved.info
        key = self._key(saved.tokens, info.kv_bits)
        name = Path(info.path).name
        record = PrefixRecord(key, f"snapshots/{name}", info.checksum, saved.tokens,
                              info.bytes, info.kv_bits)
        left = remove_files(self._store.prefixes.record(record))
        self._known_stored = key
        if left:
            log.warning("unused pinned prefixes not deleted: %s", ", ".join(left))
