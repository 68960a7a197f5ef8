"""The open session's KV cache on disk: one segment per turn, restored along
the branch's path. Sessions saved before segments existed restore from their
whole-cache snapshot; their next save writes a first segment from token 0 and
the old file is removed.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from mlxchat import paths
from mlxchat.chat import Message
from mlxchat.engine.disk import segment_file, segments
from mlxchat.engine.disk.checks import CacheFileRejected, failure_words
from mlxchat.engine.disk.segments import SegmentRef
from mlxchat.engine.events import CacheLoad
from mlxchat.engine.interface import Engine
from mlxchat.engine.kv.reuse import common_prefix
from mlxchat.files import remove_files
from mlxchat.session import compaction
from mlxchat.session.current import OpenSession
from mlxchat.store import SegmentRecord, SessionStore, StoreError, kv_names
from mlxchat.turn_stats import TurnStats

log = logging.getLogger(__name__)

#: Restoring a branch reads every token its files cover; prefilling computes
#: only those the live cache lacks, each several times dearer than reading it
#: (16k tokens of an 8B cache restore in 2.7 s; a Mac prefills them in 15-50 s).
#: A restore is taken when it spares the prefill at least this share of what
#: it reads.
RESTORE_WORTH_SHARE = 1 / 8


@dataclass
class CacheOnDisk:
    """What the open branch has on disk."""

    segments: int
    """Distinct files the branch's segments are in."""
    tokens: int
    """Positions the branch's consecutive segments cover from the start."""
    file_bytes: int
    """Bytes of those files, each counted once."""
    newest: Path | None
    shared_bytes: int = 0
    """Of ``file_bytes``, those in files other branches or sessions also name."""
    session_bytes: int = 0
    """Bytes of every file the session's branches name, each counted once."""


def segment_refs(rows: Sequence[SegmentRecord]) -> list[SegmentRef]:
    """Rows as references the engine can check; a path that leads outside the
    snapshots folder is treated as a missing file, never opened."""
    out = []
    for r in rows:
        path = paths.kv_file(r.path) or paths.kv_dir() / "missing"
        out.append(SegmentRef(path, r.start, r.end, r.checksum, r.token_ids))
    return out


class CacheKeeper:
    """Writes the open branch's KV cache to disk after each turn and restores
    it when the session is opened."""

    def __init__(self, open_session: OpenSession, store: SessionStore, engine: Engine, *,
                 keep_segments: bool = True, writes: Callable[[], bool] = lambda: True):
        self._open = open_session
        self._writes = writes
        """False while another process writes this session's files (its lock
        is not held here): nothing is joined then."""
        self._store = store
        self._engine = engine
        self._keep = keep_segments
        self.last_load: CacheLoad | None = None
        """What the last restore found (None: nothing on disk, or not restored yet)."""
        self.prompt_apart = False
        """Save a turn's prompt part apart from its reply's (``_prompt_part``):
        the API server's clients may send a reply back changed."""
        self._writing = threading.Lock()
        """Held while a segment file is written and recorded, or files are joined
        (a sweep must never see a file whose row is not committed yet)."""

    def forget(self) -> None:
        self.last_load = None

    def words(self) -> str:
        """What happened to the session's KV cache on disk when it was opened."""
        snap = self.last_load
        if snap is None:
            return "no KV snapshot: the next turn prefills the history"
        if snap.from_live:
            return f"KV cache kept in memory ({snap.tokens:,} tokens; no file read)"
        if snap.ok and snap.reason:
            return (f"KV cache restored for its first {snap.tokens:,} tokens ({snap.reason}); "
                    "the next turn recomputes the rest")
        if snap.ok:
            return f"KV cache restored from its snapshot ({snap.tokens:,} tokens)"
        return f"KV snapshot not used ({snap.reason}); the next turn recomputes the history"

    def restore(self) -> CacheLoad | None:
        """Load the branch's KV from disk into the engine (a rejection is reported
        by the next turn as its miss reason)."""
        session = self._open.session
        rows = self._store.segments.on_branch(session.leaf_id) if session.id else []
        if rows:
            refs = self._prefix_refs(rows[0]) + segment_refs(rows)
            self.last_load = self._kept_live(refs)
            if self.last_load is None:
                covered = self._path_to(rows[-1].message_id)
                self.last_load = self._engine.load_segments(
                    refs, conversation=self._open.with_system(covered))
            return self.last_load
        return self._restore_whole_snapshot()

    def _kept_live(self, refs: Sequence[SegmentRef]) -> CacheLoad | None:
        """The live cache already holds every token the files would bring back
        (the same turn sent again, a fork of the open branch): it is kept (the
        next turn trims it back) and no file is read. None: the files are needed."""
        tokens: list[int] = []
        for ref in refs:
            if ref.start != len(tokens):
                break
            tokens.extend(ref.token_ids)
        if (not tokens or common_prefix(self._engine.cached_tokens, tokens) < len(tokens)
                or self._engine.needs_restore(tokens)):
            return None
        return CacheLoad(ok=True, tokens=len(tokens), from_live=True)

    def worth_restoring(self, tokens: Sequence[int]) -> bool:
        """The live cache holds another branch (left by /branch) and this
        branch's files cover enough more of ``tokens`` to pay for reading them."""
        live = self._engine.cached_tokens
        shared = common_prefix(live, tokens)
        if live and shared == len(live):
            return False  # an ordinary follow-up: the files hold no more than it
        covered = self.covers(tokens)
        if covered > shared:  # only files made with this model can come back
            covered = min(covered, self.saved_for_model())
        return covered > shared and covered - shared >= covered * RESTORE_WORTH_SHARE

    def covers(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the open branch's files would restore, by
        their recorded ids (no file is read)."""
        session = self._open.session
        rows = self._store.segments.on_branch(session.leaf_id) if session.id else []
        covered = 0
        for ref in (self._prefix_refs(rows[0]) + segment_refs(rows)) if rows else []:
            if (ref.start != covered or list(tokens[ref.start:ref.end]) != ref.token_ids
                    or not ref.path.is_file()):
                break
            covered = ref.end
        return covered

    def saved_for_model(self) -> int:
        """Tokens from the open branch's start that its files made with the
        loaded model (and template) hold: what a restore can bring back now.
        Each file's header is read, not its data."""
        info = self._engine.info
        session = self._open.session
        rows = self._store.segments.on_branch(session.leaf_id) if session.id else []
        covered = 0
        for ref in (self._prefix_refs(rows[0]) + segment_refs(rows)) if rows else []:
            if ref.start != covered:
                break
            try:
                file = segment_file.open_file(ref.path)
            except CacheFileRejected:
                break
            try:
                problem = segments.origin_problem(file.meta, what="a KV segment",
                                                  fingerprint=info.fingerprint,
                                                  template_hash=info.chat_template_hash)
            finally:
                file.close()
            if problem:
                break
            covered = ref.end
        return covered

    def _path_to(self, message_id: int) -> list[Message]:
        try:
            return self._store.branch_path(message_id)
        except StoreError:
            return []

    def _restore_whole_snapshot(self) -> CacheLoad | None:
        """A session saved before segments existed: its one whole-cache file."""
        session_id = self._open.id
        record = self._store.snapshots.latest(session_id) if session_id else None
        if record is None:
            self.last_load = None
            return None
        covered = self._path_to(record.leaf_id) if record.leaf_id is not None else []
        self.last_load = self._engine.load_snapshot(
            record.path, expected_checksum=record.sha256,
            conversation=self._open.with_system(covered))
        return self.last_load

    def save(self, stats: TurnStats | None = None) -> Path | None:
        """Write what the last turn added to the cache as a segment of the leaf;
        never raises (disk full, permissions): the conversation is already
        committed. A failure is said on ``stats``."""
        with self._writing:
            return self._save(stats)

    def compact(self) -> compaction.Compacted | None:
        """Join the open branch's segment files into one (see ``compaction``);
        None when there is no saved branch. Cheap when there is nothing to join
        (two queries and a folder listing); never raises."""
        session_id, leaf = self._open.id, self._open.session.leaf_id
        if (not self._keep or session_id is None or leaf is None
                or self._engine.segments_per_rank or not self._writes()):
            return None
        with self._writing:
            return compaction.compact(self._store, session_id, leaf, segment_refs)

    def _save(self, stats: TurnStats | None) -> Path | None:
        session_id, leaf = self._open.id, self._open.session.leaf_id
        if not self._keep or session_id is None or leaf is None:
            return None
        live = self._engine.cached_tokens
        start, prefix_key = self._stored_prefix(live)
        base = start
        for row in self._store.segments.on_branch(leaf):
            file = paths.kv_file(row.path)
            if (row.start != start or live[row.start:row.end] != row.token_ids
                    or file is None or not file.is_file()
                    or (base and row.start == base and row.prefix_key != prefix_key)):
                break  # rewrite from here: what follows cannot be restored
            start = row.end
        if start >= len(live):
            return None  # everything is on disk already
        try:
            prompt_end, prompt_leaf = self._prompt_part(stats, start, live)
            if prompt_end:  # the prompt's part first, on the prompt's last message
                self._write(session_id, prompt_leaf, start, prompt_end, live, prefix_key)
                start = prompt_end
            path = self._write(session_id, leaf, start, None, live, prefix_key)
        except (OSError, RuntimeError, ValueError, StoreError) as exc:
            warning = f"snapshot not saved: {failure_words(exc)}"
            log.warning(warning)
            if stats is not None:
                stats.snapshot_warning = warning
            return None
        if start == 0:  # a whole-cache snapshot from before segments is superseded
            remove_files(self._store.snapshots.drop(session_id))
        return path

    def _prompt_part(self, stats: TurnStats | None, start: int,
                     live: Sequence[int]) -> tuple[int, int | None]:
        """Where the turn's prompt ends in the live cache and the message it
        ends with, when its part is saved apart from the reply's: a client
        that sends the reply back changed (an agent replaying its own turn)
        forks the branch at the reply, and the prompt's part stays on the new
        branch. (0, None): one segment, as before."""
        messages = self._open.messages if self.prompt_apart else []
        end = stats.prompt_tokens if stats is not None else 0
        if (len(messages) < 2 or messages[-2].id is None or messages[-1].role != "assistant"
                or not start < end < len(live)
                or self._engine.needs_restore(list(live[:end]))):
            return 0, None
        return end, messages[-2].id

    def _write(self, session_id: int, leaf: int, start: int, end: int | None,
               live: Sequence[int], prefix_key: str | None) -> Path:
        """One segment file, ``[start, end)`` of the live cache, recorded on ``leaf``."""
        stop = len(live) if end is None else end
        name = kv_names.segment(self._store.segments.file_tag(), session_id, leaf, start, stop)
        folder = paths.ensure_private_dir(paths.kv_dir())
        info = self._engine.save_segment(folder / name, start, end)
        path = Path(info.path)  # a fresh name when that one was taken
        self._store.segments.record(
            session_id, leaf, start=start, end=info.end, path=f"snapshots/{path.name}",
            checksum=info.checksum, file_bytes=info.bytes, kv_bits=info.kv_bits,
            token_ids=list(live[start:info.end]), prefix_key=prefix_key if start else None)
        return path

    def _stored_prefix(self, live: Sequence[int]) -> tuple[int, str | None]:
        """Where the session's own segments start: after its pinned prefix when
        that is stored and the live cache begins with it (its KV is not written
        again), else at 0."""
        key = self._open.session.pins[0].prefix_key if self._open.session.pins else None
        record = self._store.prefixes.get(key) if key else None
        if (record is None or list(live[:len(record.token_ids)]) != record.token_ids
                or len(record.token_ids) >= len(live) or record.file() is None):
            return 0, None
        return len(record.token_ids), record.key

    def _prefix_refs(self, first: SegmentRecord) -> list[SegmentRef]:
        """The stored prefix a branch's first segment continues, as its first
        reference ([] when it starts at 0, or the prefix is gone: then the
        restore stops there and the turn recomputes)."""
        key = first.prefix_key if first.start else None
        record = self._store.prefixes.get(key) if key else None
        file = paths.kv_file(record.path) if record else None
        if record is None or file is None or len(record.token_ids) != first.start:
            return []
        return [SegmentRef(file, 0, first.start, record.checksum, record.token_ids)]

    def drop(self) -> int:
        """Forget the live cache and delete the session's snapshot and segment files."""
        self._engine.drop_cache("cache dropped by /cache drop")
        session_id = self._open.id
        if session_id is None:
            return 0
        from mlxchat.engine.distributed.rank_files import with_rank_files

        files = self._store.snapshots.drop(session_id) + with_rank_files(
            self._store.segments.drop(session_id))
        remove_files(files)
        return len(files)

    def on_disk(self) -> CacheOnDisk:
        session = self._open.session
        rows = self._store.segments.on_branch(session.leaf_id) if session.id else []
        covered = rows[0].start if rows and rows[0].prefix_key else 0  # the shared prefix
        for r in rows:
            if r.start != covered:
                break
            covered = r.end
        newest = paths.kv_file(rows[-1].path) if rows else None
        files = {r.path: r.file_bytes for r in rows}  # a joined file is named by many rows
        shared = self._store.segments.shared(list(files), [r.message_id for r in rows])
        return CacheOnDisk(len(files), covered, sum(files.values()), newest,
                           shared_bytes=sum(files[p] for p in shared),
                           session_bytes=self._store.segments.session_bytes(session.id)
                           if session.id else 0)
