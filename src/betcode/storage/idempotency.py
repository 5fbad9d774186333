"""The `processed_idempotency_keys` table: client actions already applied.

A key counts for IDEMPOTENCY_WINDOW_SECONDS; older keys are dropped whenever a key is
remembered or looked up, so the table stays small without a sweeper. A message's key is
recorded in the transaction that records the message (its line, queued row or cost request:
storage/rows.py IdempotencyKeyRow), never on its own before it.
"""

from __future__ import annotations

import sqlite3

IDEMPOTENCY_WINDOW_SECONDS = 86_400


def remember_key(
    conn: sqlite3.Connection,
    key: str,
    session_id: str,
    now: float,
    window_seconds: float = IDEMPOTENCY_WINDOW_SECONDS,
) -> bool:
    """Record a key; True if it is new (apply the action), False if it was seen within the
    window (skip it)."""
    purge_keys(conn, now, window_seconds)
    cursor = conn.execute(
        "INSERT INTO processed_idempotency_keys (key, session_id, processed_at) "
        "VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
        (key, session_id, now),
    )
    return cursor.rowcount == 1


def key_recorded(
    conn: sqlite3.Connection,
    key: str,
    now: float,
    window_seconds: float = IDEMPOTENCY_WINDOW_SECONDS,
) -> bool:
    """Whether the key was recorded within the window (its action is done: skip it)."""
    purge_keys(conn, now, window_seconds)
    return is_key_seen(conn, key)


def is_key_seen(conn: sqlite3.Connection, key: str) -> bool:
    row = conn.execute("SELECT 1 FROM processed_idempotency_keys WHERE key = ?", (key,)).fetchone()
    return row is not None


def purge_keys(
    conn: sqlite3.Connection, now: float, window_seconds: float = IDEMPOTENCY_WINDOW_SECONDS
) -> int:
    """Forget keys older than the window; return how many were dropped."""
    cursor = conn.execute(
        "DELETE FROM processed_idempotency_keys WHERE processed_at < ?", (now - window_seconds,)
    )
    return cursor.rowcount
