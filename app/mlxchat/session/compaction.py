"""A branch's KV segment files joined into one, when the session is left.

A turn writes one segment file; a long session restores from many. When the
session is closed or another one opened, each run of consecutive files the
open branch uses whole is joined into one (``engine.segment_compact``), and
every row naming a joined file, in any session, is pointed at the new one:
branches and forks keep sharing what they shared, and a shared prefix file
is never joined. Files a branch uses only in part (another branch's joined
file) are left as they are.

Kill-safe by its order: the new file is written to a temp file, synced and
given a name no file has (``kv_names``: never another's); then the rows move
to it in one transaction; then the old files, which no row names any more,
are deleted. A source whose bytes fail their checksum stops its run: nothing
is removed, and the warning says so. Leftovers of a kill (a temp file, a
joined file no row names, old files no row names) are deleted by the next
compaction of the session, among the files named with this database's tag
only; the rows always name files that exist.

The app and the API server also join a session once it has been idle
``IDLE_JOIN_S`` after a turn; the server, which lets go of a session between
requests, joins it under its lock (``compact_saved``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from mlxchat import paths
from mlxchat.engine.disk import joiner
from mlxchat.engine.disk.checks import CacheFileRejected
from mlxchat.engine.disk.segments import SegmentRef
from mlxchat.files import remove_files
from mlxchat.session.lock import SessionBusy, SessionLock
from mlxchat.store import SegmentRecord, SessionNotFound, SessionStore, StoreError, kv_names

log = logging.getLogger(__name__)

IDLE_JOIN_S = 30.0
"""After a turn, how long a session stays idle before its segment files are joined."""

Refs = Callable[[Sequence[SegmentRecord]], list[SegmentRef]]
"""Rows as references the engine can check (``cache_keeper.segment_refs``)."""

Run = list[list[SegmentRecord]]
"""Consecutive files, each as the consecutive rows of the branch naming it."""


@dataclass
class Compacted:
    """What a compaction of the open branch did."""

    joined: int
    """Files joined (0: nothing to do)."""
    written: int
    """Files written in their place."""
    removed: int
    """Files deleted (old files, and leftovers of an earlier kill)."""
    warning: str | None = None


def runs(rows: Sequence[SegmentRecord], spans: dict[str, tuple[int, int]]) -> list[Run]:
    """The runs of two or more consecutive files the branch's ``rows`` use
    whole (``spans``: what each file covers, from the rows naming it)."""
    groups: list[list[SegmentRecord]] = []
    for r in rows:
        if groups and groups[-1][-1].path == r.path and groups[-1][-1].end == r.start:
            groups[-1].append(r)
        else:
            groups.append([r])
    out: list[Run] = []
    current: Run = []
    for g in groups:
        whole = spans.get(g[0].path) == (g[0].start, g[-1].end)
        if whole and current and current[-1][-1].end == g[0].start:
            current.append(g)
            continue
        if len(current) > 1:
            out.append(current)
        current = [g] if whole else []
    if len(current) > 1:
        out.append(current)
    return out


def same_origin(run: Run, refs: Refs) -> list[Run]:
    """``run`` cut where its files' origin changes (a branch that went on with
    another model): the parts of two or more files each made for one model."""
    parts: list[Run] = []
    last: tuple[str, ...] | None = None
    for group in run:
        origin = joiner.origin_of(refs(group)[0].path)
        if origin is None or origin != last or not parts:
            parts.append([])
        parts[-1].append(group)
        last = origin
    return [p for p in parts if len(p) > 1]


def compact(store: SessionStore, session_id: int, leaf: int, refs: Refs) -> Compacted:
    """Join the branch's runs of files; never raises (the rows keep naming the
    old files when anything fails). Only the session's writer calls it."""
    try:
        return _compact(store, session_id, leaf, refs)
    except (OSError, StoreError) as exc:
        log.warning("KV segments not joined: %s", exc)
        return Compacted(0, 0, 0, warning=str(exc))


def compact_saved(store: SessionStore, session_id: int, refs: Refs, *,
                  holder: str) -> Compacted | None:
    """Join a saved session's files on its stored branch, holding its lock
    meanwhile; None when another holder has it open (that one joins it)."""
    if not store.path or store.path == ":memory:":
        return None
    try:
        lock = SessionLock(store.path, session_id, holder=holder)
    except SessionBusy:
        return None
    try:
        leaf = store.get_session(session_id).leaf_id
    except (SessionNotFound, StoreError):  # deleted meanwhile: nothing to join
        leaf = None
    try:
        return Compacted(0, 0, 0) if leaf is None else compact(store, session_id, leaf, refs)
    finally:
        lock.release()


def _compact(store: SessionStore, session_id: int, leaf: int, refs: Refs) -> Compacted:
    tag = store.segments.file_tag()
    removed = sweep(store, session_id)
    rows = store.segments.on_branch(leaf)
    todo = [part for run in runs(rows, store.segments.spans(sorted({r.path for r in rows})))
            for part in same_origin(run, refs)]
    done = Compacted(joined=0, written=0, removed=removed)
    for run in todo:
        wanted = paths.kv_dir() / kv_names.joined(tag, session_id, run[0][0].start,
                                                   run[-1][-1].end)
        written: Path | None = None
        try:
            info = joiner.compact([refs(g) for g in run], wanted)
            written = Path(info.path)
            gone = store.segments.replace_files([(g[0].path, g[0].checksum) for g in run],
                                                path=f"snapshots/{written.name}",
                                                checksum=info.checksum, file_bytes=info.bytes)
        except (CacheFileRejected, OSError, StoreError) as exc:
            # The old files stay as they are; only a joined file written here and
            # named by no row goes (never one that had the name before).
            done.warning = f"KV segments not joined: {exc}"
            log.warning(done.warning)
            if written is not None and store.segments.unnamed([f"snapshots/{written.name}"]):
                remove_files([written])
            continue
        done.joined += len(run)
        done.written += 1
        done.removed += len(gone) - len(remove_files(gone))
    return done


def sweep(store: SessionStore, session_id: int) -> int:
    """Delete the session's segment files no row names and its compaction temp
    files: what a kill left. Only files named with this database's tag
    (``kv_names``): another database's, and those named before tags, are
    never this sweep's. Only this session's writer calls it (the session
    lock), between turns."""
    folder = paths.kv_dir()
    if not folder.is_dir():
        return 0
    tag = store.segments.file_tag()
    temps = list(folder.glob(kv_names.joined_temps(tag, session_id)))
    # A split model's other ranks' shards (NAME.rankRofN.safetensors) are named
    # by rank 0's manifest, not by a row: never theirs to sweep.
    named = [f"snapshots/{p.name}" for pattern in kv_names.session_patterns(tag, session_id)
             for p in folder.glob(pattern) if ".rank" not in p.name]
    unnamed = [folder / Path(p).name for p in store.segments.unnamed(named)]
    files = temps + unnamed
    return len(files) - len(remove_files(files))
