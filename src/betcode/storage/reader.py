"""Reads off the event loop: a small pool of query-only connections used from worker threads.

Replay reads are keyset pages (`sequence > ? ORDER BY sequence LIMIT ?`), which stay fast at
any depth and never hold a read transaction open between pages.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from betcode.storage.database import Database
from betcode.storage.rows import MessageRow

T = TypeVar("T")

REPLAY_PAGE = 1000
MAX_READ_CONNECTIONS = 4


def events_after(
    conn: sqlite3.Connection, session_id: str, after_seq: int, limit: int = REPLAY_PAGE
) -> list[tuple[int, bytes]]:
    """(event seq, serialized AgentEvent) with seq > after_seq, ascending, at most `limit`."""
    rows = conn.execute(
        "SELECT sequence, payload FROM events WHERE session_id = ? AND sequence > ? "
        "ORDER BY sequence LIMIT ?",
        (session_id, after_seq, limit),
    ).fetchall()
    return [(int(seq), bytes(payload)) for seq, payload in rows]


def messages_after(
    conn: sqlite3.Connection, session_id: str, after_seq: int, limit: int = REPLAY_PAGE
) -> list[MessageRow]:
    """Stored NDJSON lines with line seq > after_seq, ascending, payload as the raw bytes."""
    rows = conn.execute(
        "SELECT sequence, direction, message_type, CAST(payload AS BLOB), created_at "
        "FROM messages WHERE session_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
        (session_id, after_seq, limit),
    ).fetchall()
    return [
        MessageRow(session_id, seq, direction, message_type, bytes(payload), created_at)
        for seq, direction, message_type, payload, created_at in rows
    ]


def lines_of_current_turn(
    conn: sqlite3.Connection, session_id: str, since: float
) -> list[MessageRow]:
    """The stored lines (both ways) of a session since `since` from claude's newest
    `system/init` on (all of them when it printed none), preceded by its `result` before
    that init: what a translator must see again to be where the last one left off."""
    rows = conn.execute(
        "SELECT sequence, direction, message_type, CAST(payload AS BLOB), created_at "
        "FROM messages WHERE session_id = ? AND created_at >= ? ORDER BY sequence DESC",
        (session_id, since),
    )
    kept: list[MessageRow] = []
    found_init = False
    for seq, direction, message_type, payload, created_at in rows:
        row = MessageRow(session_id, seq, direction, message_type, bytes(payload), created_at)
        if not found_init:
            kept.append(row)
            found_init = direction == "out" and message_type == "system" and _is_init(row.payload)
        elif direction == "out" and message_type == "result":
            kept.append(row)
            break
    kept.reverse()
    return kept


def _is_init(payload: bytes) -> bool:
    return b'"subtype":"init"' in payload or b'"subtype": "init"' in payload


def newest_event(
    conn: sqlite3.Connection, session_id: str, kind: str, wanted: Callable[[bytes], bool]
) -> bytes | None:
    """The newest stored event of `kind` whose serialized form is `wanted`."""
    rows = conn.execute(
        "SELECT payload FROM events WHERE session_id = ? AND kind = ? ORDER BY sequence DESC",
        (session_id, kind),
    )
    return next((bytes(payload) for (payload,) in rows if wanted(bytes(payload))), None)


def last_system_init(conn: sqlite3.Connection, session_id: str | None) -> bytes | None:
    """The newest `system/init` line claude wrote in the session (any session when None)."""
    where = (
        "direction = 'out' AND message_type = 'system' AND (payload LIKE '%\"subtype\":\"init\"%'"
        ' OR payload LIKE \'%"subtype": "init"%\')'
    )
    if session_id is None:
        row = conn.execute(
            f"SELECT CAST(payload AS BLOB) FROM messages WHERE {where} ORDER BY id DESC LIMIT 1"
        ).fetchone()
    else:
        row = conn.execute(
            f"SELECT CAST(payload AS BLOB) FROM messages WHERE session_id = ? AND {where} "
            "ORDER BY sequence DESC LIMIT 1",
            (session_id,),
        ).fetchone()
    return None if row is None else bytes(row[0])


def max_sequences(conn: sqlite3.Connection, session_id: str) -> tuple[int, int]:
    """(highest line seq, highest event seq) of a session; 0 when it has none yet."""
    row = conn.execute(
        "SELECT (SELECT COALESCE(MAX(sequence), 0) FROM messages WHERE session_id = ?), "
        "(SELECT COALESCE(MAX(sequence), 0) FROM events WHERE session_id = ?)",
        (session_id, session_id),
    ).fetchone()
    return int(row[0]), int(row[1])


class StoreReader:
    """Runs read functions in worker threads on pooled query-only connections."""

    def __init__(self, database: Database, *, max_connections: int = MAX_READ_CONNECTIONS) -> None:
        self._database = database
        self._slots = threading.BoundedSemaphore(max_connections)
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(conn)` in a worker thread; the loop only awaits the result."""
        return await asyncio.to_thread(self._with_connection, fn)

    async def read_events(
        self, session_id: str, after_seq: int, limit: int = REPLAY_PAGE
    ) -> list[tuple[int, bytes]]:
        return await self.read(
            partial(events_after, session_id=session_id, after_seq=after_seq, limit=limit)
        )

    async def read_messages(
        self, session_id: str, after_seq: int, limit: int = REPLAY_PAGE
    ) -> list[MessageRow]:
        return await self.read(
            partial(messages_after, session_id=session_id, after_seq=after_seq, limit=limit)
        )

    async def max_sequences(self, session_id: str) -> tuple[int, int]:
        return await self.read(partial(max_sequences, session_id=session_id))

    def close(self) -> None:
        """Close every pooled connection (call when no read is in flight)."""
        with self._lock:
            while not self._idle.empty():
                self._idle.get_nowait()
            for conn in self._all:
                conn.close()
            self._all.clear()

    def _with_connection(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._slots:
            conn = self._checkout()
            try:
                return fn(conn)
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                self._idle.put(conn)

    def _checkout(self) -> sqlite3.Connection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            conn = self._database.connect(query_only=True)
            with self._lock:
                self._all.append(conn)
            return conn
