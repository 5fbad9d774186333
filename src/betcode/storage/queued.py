"""`queued_messages`: the messages waiting for a turn slot, kept across daemon restarts."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from betcode.storage.rows import DELETE_QUEUED_MESSAGE


def add(conn: sqlite3.Connection, session_id: str, text: str, now: float) -> int:
    """Queue a message last; its row id."""
    cursor = conn.execute(
        "INSERT INTO queued_messages (session_id, text, queued_at) VALUES (?, ?, ?)",
        (session_id, text, now),
    )
    return int(cursor.lastrowid or 0)


def remove(conn: sqlite3.Connection, row_ids: Iterable[int]) -> None:
    conn.executemany(DELETE_QUEUED_MESSAGE, [(i,) for i in row_ids])


def in_order(conn: sqlite3.Connection) -> list[tuple[int, str, str]]:
    """(row id, session id, text) of every queued message, first queued first."""
    rows = conn.execute("SELECT id, session_id, text FROM queued_messages ORDER BY id")
    return [(int(row_id), str(session_id), str(text)) for row_id, session_id, text in rows]
