"""'Always allow' answers to a tool's consent dialog, for one session or
everywhere; listed and revoked by ``/tools trust``. A grant holds only for the
server as it was configured when it was given (its fingerprint)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from mlxchat.store.database import Database


@dataclass(frozen=True)
class ToolGrant:
    id: int
    server: str
    tool: str
    fingerprint: str
    session_id: int | None
    """None: every session."""
    created: float


def _grant(row) -> ToolGrant:
    return ToolGrant(row["id"], row["server"], row["tool"], row["fingerprint"],
                     row["session_id"], row["created"])


class ToolGrants:
    """The grants table over the store's database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def grant(self, server: str, tool: str, fingerprint: str, *,
              session_id: int | None) -> None:
        """Allow ``server.tool`` without asking, in one session or (None) everywhere."""
        with self._db.writing() as cur:
            cur.execute("DELETE FROM tool_grants WHERE COALESCE(session_id, 0) = ?"
                        " AND server = ? AND tool = ?", (session_id or 0, server, tool))
            cur.execute("INSERT INTO tool_grants (session_id, server, tool, fingerprint, created)"
                        " VALUES (?, ?, ?, ?, ?)",
                        (session_id, server, tool, fingerprint, time.time()))

    def find(self, server: str, tool: str, fingerprint: str, *,
             session_id: int | None) -> ToolGrant | None:
        """The grant that lets this call run unasked (this session's first)."""
        with self._db.reading() as cur:
            row = cur.execute(
                "SELECT * FROM tool_grants WHERE server = ? AND tool = ? AND fingerprint = ?"
                " AND (session_id IS NULL OR session_id = ?) ORDER BY session_id IS NULL LIMIT 1",
                (server, tool, fingerprint, session_id or -1)).fetchone()
        return None if row is None else _grant(row)

    def listed(self, *, session_id: int | None) -> list[ToolGrant]:
        """Every grant that applies to the session: its own, then everywhere's."""
        with self._db.reading() as cur:
            rows = cur.execute(
                "SELECT * FROM tool_grants WHERE session_id IS NULL OR session_id = ?"
                " ORDER BY session_id IS NULL, server, tool", (session_id or -1,)).fetchall()
        return [_grant(r) for r in rows]

    def revoke(self, grant_ids: list[int]) -> int:
        """Remove grants; how many there were."""
        with self._db.writing() as cur:
            return sum(cur.execute("DELETE FROM tool_grants WHERE id = ?", (i,)).rowcount
                       for i in grant_ids)
