"""The life of saved sessions around an open conversation: list, find, rename,
delete (with its snapshot files), fork, branches, export and import. Commands
and screens call these (through ``Conversation``) and render what they return.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from mlxchat.chat import Session, SessionSummary
from mlxchat.files import remove_files
from mlxchat.session.current import OpenSession
from mlxchat.store import BranchInfo, SessionStore, SnapshotRecord, StoreError
from mlxchat.store.export import ExportFormat, export_session
from mlxchat.store.importing import import_json

log = logging.getLogger(__name__)


@dataclass
class Deleted:
    """What ``delete_session`` did."""

    session_id: int
    title: str
    files: int
    """Snapshot files that belonged to it."""
    left: list[str]
    """Files that could not be deleted (remove them by hand)."""
    replacement: Session | None = None
    """The new empty session opened because the open one was deleted."""


class SavedSessions:
    """Operations on the store's sessions that go beyond the open branch."""

    def __init__(self, open_session: OpenSession, store: SessionStore):
        self._open = open_session
        self._store = store

    # -- read-only views -------------------------------------------------------------
    @property
    def database(self) -> str | None:
        """The sessions database's file (None: a throwaway store in memory)."""
        return self._store.path or None

    def list(self, *, limit: int = 100, search: str | None = None) -> list[SessionSummary]:
        return self._store.list_sessions(limit=limit, search=search)

    def find(self, id_or_title: str) -> Session:
        return self._store.find_session(id_or_title)

    def branches(self) -> list[BranchInfo]:
        return self._store.branches.of(self._open.stored_id())

    def snapshot_record(self, session_id: int | None = None) -> SnapshotRecord | None:
        """The newest snapshot file recorded for the session (default: the open one)."""
        return self._store.snapshots.latest(session_id or self._open.stored_id())

    def leaves_holding(self, message_id: int) -> list[int]:
        """The leaves of this session's branches that hold ``message_id``."""
        return self._store.branches.leaves_holding(self._open.stored_id(), message_id)

    # -- changes -------------------------------------------------------------------
    def rename(self, title: str, session_id: int | None = None) -> Session:
        """Rename a session (default: the open one); returns it as stored."""
        target = session_id or self._open.stored_id()
        renamed = self._store.rename_session(target, title)
        if target == self._open.id:
            return self._open.reload()
        return renamed

    def delete(self, session_id: int | None = None) -> Deleted:
        """Delete a session, every branch and its snapshot files (the caller
        replaces the open one when that was it)."""
        target = session_id or self._open.stored_id()
        title = (self._open.session.title if target == self._open.id
                 else self._store.get_session(target).title)
        files, left = delete_stored_session(self._store, target)
        return Deleted(target, title, len(files), left)

    def fork(self) -> Session:
        """Copy the open branch into a new session (not opened)."""
        return self._store.branches.fork(self._open.stored_id())

    def switch_branch(self, leaf_id: int) -> Session:
        """Make the branch ending at ``leaf_id`` (or holding it) the current one."""
        session_id = self._open.stored_id()
        if leaf_id in {b.leaf_id for b in self._store.branches.of(session_id)}:
            self._store.branches.set_leaf(session_id, leaf_id)
        else:
            self._store.branches.switch(session_id, leaf_id)
        return self._open.reload()

    def export(self, fmt: ExportFormat, dest: str | None, *, cwd: Path,
               folder: Path | None = None) -> Path:
        """Write the open session as Markdown (its branch) or JSON (every branch)."""
        return export_session(self._store, self._open.stored_id(), fmt, dest, cwd=cwd,
                              folder=folder)

    def import_file(self, path: Path) -> Session:
        """Store a JSON export as a new session (not opened)."""
        return import_json(self._store, path)

    def discard_if_empty(self) -> bool:
        """Delete the open session when nothing was ever written to it (no message
        or pin), so quitting or leaving an unused window leaves no 'New chat'
        behind (and --continue skips it)."""
        session_id = self._open.id
        if session_id is None:
            return False
        try:
            if self._store.all_messages(session_id) or self._open.session.pins:
                return False  # a pinned document is something written to it too
        except StoreError:
            return False  # deleted already (the API server discards its own)
        try:
            delete_stored_session(self._store, session_id)
        except Exception as exc:  # noqa: BLE001 - cleanup on exit must not fail the exit
            log.warning("empty session #%s not removed: %s", session_id, exc)
            return False
        return True


__all__ = ["Deleted", "SavedSessions", "delete_stored_session"]


def delete_stored_session(store: SessionStore, session_id: int) -> tuple[list[Path], list[str]]:
    """Delete the session's rows, then the files only it named (a split model's
    local rank files and manifests too): (those files, those not deleted)."""
    from mlxchat.engine.distributed.rank_files import with_rank_files

    files = with_rank_files(store.delete_session(session_id))
    return files, remove_files(files)
