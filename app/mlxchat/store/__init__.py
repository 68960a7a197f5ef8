"""The session store: sessions, branching messages, search, snapshots bookkeeping.

Stdlib only (sqlite3, json); never imports textual or mlx.
"""

from mlxchat.store.errors import SessionNotFound, StoreError, StoreLocked
from mlxchat.store.opening import open_store
from mlxchat.store.pins import PinUse, PrefixRecord
from mlxchat.store.records import BranchInfo, SegmentRecord, SnapshotRecord
from mlxchat.store.rows import title_from
from mlxchat.store.schema import SCHEMA_VERSION
from mlxchat.store.search import fts_query
from mlxchat.store.sessions import CURRENT_LEAF, SessionStore

__all__ = [
    "CURRENT_LEAF",
    "SCHEMA_VERSION",
    "BranchInfo",
    "PinUse",
    "PrefixRecord",
    "SegmentRecord",
    "SessionNotFound",
    "SessionStore",
    "SnapshotRecord",
    "StoreError",
    "StoreLocked",
    "fts_query",
    "open_store",
    "title_from",
]
