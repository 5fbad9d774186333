"""Helpers shared by the storage tests (imported by name; this folder is on sys.path)."""

from __future__ import annotations

import sqlite3

from betcode.storage.rows import EventRow, MessageRow
from betcode.storage.sessions import create_session

NOW = 1_700_000_000.0


def add_session(conn: sqlite3.Connection, session_id: str = "s1", **fields: str) -> None:
    """Insert a session row with defaults for the required columns."""
    create_session(
        conn,
        session_id=session_id,
        model=fields.get("model", "claude-sonnet"),
        working_directory=fields.get("working_directory", "/work/project"),
        worktree_id=fields.get("worktree_id"),
        now=NOW,
    )


def line_and_events(
    session_id: str, line_seq: int, first_event_seq: int, events: int = 2
) -> list[MessageRow | EventRow]:
    """One stdout line with the events translated from it, as the session layer appends them."""
    rows: list[MessageRow | EventRow] = [
        MessageRow(
            session_id, line_seq, "out", "assistant", b'{"type":"assistant","n":%d}' % line_seq, NOW
        )
    ]
    rows.extend(
        EventRow(session_id, seq, line_seq, "text_delta", b"event-%d" % seq, NOW)
        for seq in range(first_event_seq, first_event_seq + events)
    )
    return rows
