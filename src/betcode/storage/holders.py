"""`holder_positions`: how much of each session's holder output is committed (rows.py writes
it with the lines; this module reads it)."""

from __future__ import annotations

import sqlite3


def committed_offset(conn: sqlite3.Connection, session_id: str, holder_id: str) -> int:
    """The committed offset into the stdout of `holder_id` (0: nothing of it committed yet)."""
    row = conn.execute(
        "SELECT stdout_offset FROM holder_positions WHERE session_id = ? AND holder_id = ?",
        (session_id, holder_id),
    ).fetchone()
    return 0 if row is None else int(row[0])
