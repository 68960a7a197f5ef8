"""The life of saved sessions around an open conversation: list, find, rename,
delete (with its snapshot files and the live cache), fork, branches, export
and import. Commands and screens call these and render what they return.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from mlxchat.chat import Session, SessionSummary
from mlxchat.store import BranchInfo, SessionStore, SnapshotRecord, StoreError
from mlxchat.store.export import FORMATS, ExportFormat, export_session, import_json

if TYPE_CHECKING:
    from mlxchat.engine.interface import Engine

log = logging.getLogger(__name__)


def remove_files(paths: Iterable[Path | str]) -> list[str]:
    """Delete each file (a missing one is fine); return those that could not be."""
    left = []
    for path in paths:
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("%s not deleted: %s", path, exc)
            left.append(str(path))
    return left


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


class SessionLife:
    """Session operations of ``Conversation`` that go beyond the open branch."""

    store: SessionStore
    engine: Engine
    session: Session

    if TYPE_CHECKING:  # defined by Conversation
        def new_session(self) -> Session: ...

        def open_session(self, id_or_title: str | int) -> Session: ...

        def reload(self) -> Session: ...

    # -- read-only views -------------------------------------------------------------
    def list_sessions(self, *, limit: int = 100, search: str | None = None
                      ) -> list[SessionSummary]:
        return self.store.list_sessions(limit=limit, search=search)

    def find_session(self, id_or_title: str) -> Session:
        return self.store.find_session(id_or_title)

    def branches(self) -> list[BranchInfo]:
        return self.store.branches(self._stored_id())

    def snapshot_record(self, session_id: int | None = None) -> SnapshotRecord | None:
        """The newest snapshot file recorded for the session (default: the open one)."""
        return self.store.latest_snapshot(session_id or self._stored_id())

    def _stored_id(self) -> int:
        if self.session.id is None:
            raise StoreError("This session is not saved.")
        return self.session.id

    # -- changes -------------------------------------------------------------------
    def rename(self, title: str, session_id: int | None = None) -> Session:
        """Rename a session (default: the open one); returns it as stored."""
        target = session_id or self._stored_id()
        renamed = self.store.rename_session(target, title)
        if target == self.session.id:
            return self.reload()
        return renamed

    def delete_session(self, session_id: int | None = None) -> Deleted:
        """Delete a session, every branch and its snapshot files. Deleting the
        open one drops the live cache and opens a new empty session."""
        target = session_id or self._stored_id()
        title = (self.session.title if target == self.session.id
                 else self.store.get_session(target).title)
        files = self.store.delete_session(target)  # its snapshot and segment files too
        done = Deleted(target, title, len(files), remove_files(files))
        if target == self.session.id:
            self.engine.drop_cache("session deleted")
            done.replacement = self.new_session()
        return done

    def fork(self) -> tuple[Session, Session]:
        """Copy the open branch into a new session and open it: (source, copy)."""
        source = self.session
        copy = self.store.fork_session(self._stored_id())
        assert copy.id is not None
        self.open_session(copy.id)
        return source, copy

    def leaves_holding(self, message_id: int) -> list[int]:
        """The leaves of this session's branches that hold ``message_id``."""
        return self.store.leaves_holding(self._stored_id(), message_id)

    def switch_branch(self, leaf_id: int) -> Session:
        """Make the branch ending at ``leaf_id`` (or holding it) the current one."""
        session_id = self._stored_id()
        if leaf_id in {b.leaf_id for b in self.store.branches(session_id)}:
            self.store.set_leaf(session_id, leaf_id)
        else:
            self.store.switch_branch(session_id, leaf_id)
        return self.reload()

    def export(self, fmt: ExportFormat, dest: str | None, *, base_dir: Path) -> Path:
        """Write the open session as Markdown (its branch) or JSON (every branch)."""
        return export_session(self.store, self._stored_id(), fmt, dest, base_dir=base_dir)

    def import_file(self, path: Path) -> Session:
        """Store a JSON export as a new session (not opened)."""
        return import_json(self.store, path)

    def discard_if_empty(self) -> bool:
        """Delete the open session when nothing was ever written to it, so quitting
        an unused window leaves no 'New chat' behind (and --continue skips it)."""
        session_id = self.session.id
        if session_id is None:
            return False
        try:
            if self.store.all_messages(session_id) or self.session.pins:
                return False  # a pinned document is something written to it too
            remove_files(self.store.delete_session(session_id))
        except Exception as exc:  # noqa: BLE001 - cleanup on exit must not fail the exit
            log.warning("empty session #%s not removed: %s", session_id, exc)
            return False
        return True


__all__ = ["FORMATS", "Deleted", "ExportFormat", "SessionLife", "remove_files"]
