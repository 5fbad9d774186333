"""The `permission_grants` table: session-scoped allow/deny decisions (never sent to claude)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Literal

GrantAction = Literal["allow", "deny"]


@dataclass(frozen=True, slots=True)
class Grant:
    id: int
    session_id: str
    tool_name: str
    pattern: str | None
    action: GrantAction
    created_at: float


_SELECT = "SELECT id, session_id, tool_name, pattern, action, created_at FROM permission_grants"


def add_grant(
    conn: sqlite3.Connection,
    session_id: str,
    tool_name: str,
    action: GrantAction,
    now: float,
    *,
    pattern: str | None = None,
) -> Grant:
    cursor = conn.execute(
        "INSERT INTO permission_grants (session_id, tool_name, pattern, action, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        (session_id, tool_name, pattern, action, now),
    )
    assert cursor.lastrowid is not None
    return Grant(cursor.lastrowid, session_id, tool_name, pattern, action, now)


def list_grants(conn: sqlite3.Connection, session_id: str) -> list[Grant]:
    """A session's grants, oldest first."""
    rows = conn.execute(f"{_SELECT} WHERE session_id = ? ORDER BY id", (session_id,))
    return [Grant(*row) for row in rows]


def find_grant(conn: sqlite3.Connection, session_id: str, tool_name: str) -> Grant | None:
    """The newest grant for (session, tool): a later decision overrides an earlier one."""
    row = conn.execute(
        f"{_SELECT} WHERE session_id = ? AND tool_name = ? ORDER BY id DESC LIMIT 1",
        (session_id, tool_name),
    ).fetchone()
    return None if row is None else Grant(*row)


def clear_grants(conn: sqlite3.Connection, session_id: str, tool_name: str | None = None) -> int:
    """Delete a session's grants for one tool, or all of them; return how many went."""
    if tool_name is None:
        cursor = conn.execute("DELETE FROM permission_grants WHERE session_id = ?", (session_id,))
    else:
        cursor = conn.execute(
            "DELETE FROM permission_grants WHERE session_id = ? AND tool_name = ?",
            (session_id, tool_name),
        )
    return cursor.rowcount


def copy_grants(conn: sqlite3.Connection, from_session: str, to_session: str) -> int:
    """A subagent inheriting its parent's grants (SAG-10): a copy, so the two never leak into
    each other afterwards (PRM-17)."""
    return conn.execute(
        "INSERT INTO permission_grants (session_id, tool_name, pattern, action, created_at) "
        "SELECT ?, tool_name, pattern, action, created_at FROM permission_grants "
        "WHERE session_id = ?",
        (to_session, from_session),
    ).rowcount
