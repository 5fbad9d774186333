"""The `sessions` table: create, read, list with filters and paging, update, delete.

Every function takes a connection; writes belong on the writer thread (`StoreWriter.call`),
reads on a reader connection (`StoreReader.read`). Updaters return False for an unknown id.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Literal, get_args

SessionStatus = Literal["idle", "active", "completed", "error"]
PREVIEW_MAX_CHARS = 200


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: str
    claude_session_id: str | None
    worktree_id: str | None
    status: SessionStatus
    model: str
    working_directory: str
    input_lock_client: str | None
    created_at: float
    updated_at: float
    total_input_tokens: int
    total_output_tokens: int
    total_cost_usd: float
    last_message_preview: str | None
    compaction_sequence: int
    name: str
    message_count: int  # stored NDJSON lines (after compaction: those kept)


@dataclass(frozen=True, slots=True)
class SessionPage:
    sessions: list[SessionRecord]
    total: int  # matching sessions before limit/offset


_SELECT = (
    "SELECT id, claude_session_id, worktree_id, status, model, working_directory, "
    "input_lock_client, created_at, updated_at, total_input_tokens, total_output_tokens, "
    "total_cost_usd, last_message_preview, compaction_sequence, name, "
    "(SELECT COUNT(*) FROM messages WHERE messages.session_id = sessions.id) "
    "FROM sessions"
)

# The columns `_set` may change; anything else is a programming error.
_Settable = Literal["status", "name", "last_message_preview", "claude_session_id", "model"]


def create_session(
    conn: sqlite3.Connection,
    *,
    session_id: str,
    model: str,
    working_directory: str,
    now: float,
    worktree_id: str | None = None,
    name: str = "",
    claude_session_id: str | None = None,
) -> SessionRecord:
    conn.execute(
        "INSERT INTO sessions (id, worktree_id, model, working_directory, name, created_at, "
        "updated_at, claude_session_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, worktree_id, model, working_directory, name, now, now, claude_session_id),
    )
    created = get_session(conn, session_id)
    assert created is not None  # just inserted in this transaction
    return created


def get_session(conn: sqlite3.Connection, session_id: str) -> SessionRecord | None:
    row = conn.execute(f"{_SELECT} WHERE id = ?", (session_id,)).fetchone()
    return None if row is None else SessionRecord(*row)


def list_sessions(
    conn: sqlite3.Connection,
    *,
    working_directory: str | None = None,
    worktree_id: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> SessionPage:
    """Sessions matching the filters, most recently updated first."""
    conditions: list[str] = []
    params: list[str | int] = []
    if working_directory is not None:
        conditions.append("working_directory = ?")
        params.append(working_directory)
    if worktree_id is not None:
        conditions.append("worktree_id = ?")
        params.append(worktree_id)
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    total = int(conn.execute(f"SELECT COUNT(*) FROM sessions{where}", params).fetchone()[0])
    rows = conn.execute(
        f"{_SELECT}{where} ORDER BY updated_at DESC, id LIMIT ? OFFSET ?",
        [*params, -1 if limit is None else limit, offset],
    ).fetchall()
    return SessionPage([SessionRecord(*row) for row in rows], total)


def update_status(
    conn: sqlite3.Connection, session_id: str, status: SessionStatus, now: float
) -> bool:
    return _set(conn, session_id, "status", status, now)


def set_name(conn: sqlite3.Connection, session_id: str, name: str, now: float) -> bool:
    return _set(conn, session_id, "name", name, now)


def set_preview(conn: sqlite3.Connection, session_id: str, preview: str, now: float) -> bool:
    """Store the last message preview, cut to PREVIEW_MAX_CHARS characters."""
    return _set(conn, session_id, "last_message_preview", preview[:PREVIEW_MAX_CHARS], now)


def set_claude_session_id(
    conn: sqlite3.Connection, session_id: str, claude_session_id: str, now: float
) -> bool:
    return _set(conn, session_id, "claude_session_id", claude_session_id, now)


def set_model(conn: sqlite3.Connection, session_id: str, model: str, now: float) -> bool:
    return _set(conn, session_id, "model", model, now)


def add_usage(
    conn: sqlite3.Connection,
    session_id: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cost_usd: float,
    now: float,
) -> bool:
    """Add one turn's usage to the session's running totals."""
    cursor = conn.execute(
        "UPDATE sessions SET total_input_tokens = total_input_tokens + ?, "
        "total_output_tokens = total_output_tokens + ?, total_cost_usd = total_cost_usd + ?, "
        "updated_at = ? WHERE id = ?",
        (input_tokens, output_tokens, cost_usd, now, session_id),
    )
    return cursor.rowcount == 1


def move_session(
    conn: sqlite3.Connection,
    session_id: str,
    working_directory: str,
    worktree_id: str | None,
    now: float,
) -> bool:
    """Point a session at another working directory (and the worktree there, if any)."""
    cursor = conn.execute(
        "UPDATE sessions SET working_directory = ?, worktree_id = ?, updated_at = ? WHERE id = ?",
        (working_directory, worktree_id, now, session_id),
    )
    return cursor.rowcount == 1


def sessions_in(conn: sqlite3.Connection, working_directory: str) -> list[str]:
    """The ids of the sessions whose working directory is exactly this one."""
    rows = conn.execute(
        "SELECT id FROM sessions WHERE working_directory = ? ORDER BY created_at",
        (working_directory,),
    )
    return [str(session_id) for (session_id,) in rows]


def delete_session(conn: sqlite3.Connection, session_id: str) -> bool:
    """Delete a session; its messages, events, grants, pending permissions, todos, subagents
    and orchestrations go with it (ON DELETE CASCADE); its clients are detached."""
    return conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 1


def _set(
    conn: sqlite3.Connection, session_id: str, column: _Settable, value: str, now: float
) -> bool:
    if column not in get_args(_Settable):
        raise ValueError(f"sessions.{column} cannot be set this way")
    cursor = conn.execute(
        f"UPDATE sessions SET {column} = ?, updated_at = ? WHERE id = ?",
        (value, now, session_id),
    )
    return cursor.rowcount == 1
