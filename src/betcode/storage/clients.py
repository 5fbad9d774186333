"""The `connected_clients` table and the input lock (docs/GRPC.md#silent-clients).

`sessions.input_lock_client` is the stored holder; `connected_clients.has_input_lock` mirrors
it. Both change in one transaction, so at most one client per session is flagged:
`transfer_input_lock` by compare-and-swap (two writers racing for the lock cannot both win),
`record_input_lock` by setting what the running daemon's lock says (see there).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Literal

from betcode.storage.database import transaction

# What a connected client is: the three a gRPC client names itself (docs/GRPC.md#client-types), and
# `web`, the daemon's own browser client (web/); see core/validation.py for who may claim which.
ClientType = Literal["cli", "flutter", "headless", "web"]


@dataclass(frozen=True, slots=True)
class ConnectedClient:
    client_id: str
    session_id: str | None
    client_type: ClientType
    has_input_lock: bool
    connected_at: float
    last_heartbeat: float


_SELECT = (
    "SELECT client_id, session_id, client_type, has_input_lock, connected_at, last_heartbeat "
    "FROM connected_clients"
)


def _from_row(row: tuple[str, str | None, ClientType, int, float, float]) -> ConnectedClient:
    client_id, session_id, client_type, has_lock, connected_at, heartbeat = row
    return ConnectedClient(
        client_id, session_id, client_type, bool(has_lock), connected_at, heartbeat
    )


def register_client(
    conn: sqlite3.Connection,
    client_id: str,
    client_type: ClientType,
    now: float,
    *,
    session_id: str | None = None,
) -> None:
    """Record a connection; a client id seen before starts over (its lock is released)."""
    with transaction(conn):
        remove_client(conn, client_id)
        conn.execute(
            "INSERT INTO connected_clients (client_id, session_id, client_type, connected_at, "
            "last_heartbeat) VALUES (?, ?, ?, ?, ?)",
            (client_id, session_id, client_type, now, now),
        )


def heartbeat(conn: sqlite3.Connection, client_id: str, now: float) -> bool:
    cursor = conn.execute(
        "UPDATE connected_clients SET last_heartbeat = ? WHERE client_id = ?", (now, client_id)
    )
    return cursor.rowcount == 1


def remove_client(conn: sqlite3.Connection, client_id: str) -> bool:
    """Forget a connection and release any input lock it held."""
    with transaction(conn):
        conn.execute(
            "UPDATE sessions SET input_lock_client = NULL WHERE input_lock_client = ?",
            (client_id,),
        )
        cursor = conn.execute("DELETE FROM connected_clients WHERE client_id = ?", (client_id,))
    return cursor.rowcount == 1


def list_clients(conn: sqlite3.Connection, session_id: str) -> list[ConnectedClient]:
    """A session's clients in the order they connected (the order waiters get the lock)."""
    rows = conn.execute(
        f"{_SELECT} WHERE session_id = ? ORDER BY connected_at, client_id", (session_id,)
    )
    return [_from_row(row) for row in rows]


def stale_clients(conn: sqlite3.Connection, heartbeat_before: float) -> list[ConnectedClient]:
    """Clients silent since before `heartbeat_before` (to be removed, releasing their lock)."""
    rows = conn.execute(
        f"{_SELECT} WHERE last_heartbeat < ? ORDER BY last_heartbeat", (heartbeat_before,)
    )
    return [_from_row(row) for row in rows]


def transfer_input_lock(
    conn: sqlite3.Connection, session_id: str, *, expected: str | None, new_holder: str | None
) -> bool:
    """Move the lock from `expected` to `new_holder` (None = nobody) if `expected` holds it.

    Acquire: expected=None. Release: new_holder=None. Returns False, changing nothing, when
    the current holder is not `expected` or the session does not exist.
    """
    with transaction(conn):
        cursor = conn.execute(
            "UPDATE sessions SET input_lock_client = :new "
            "WHERE id = :session AND input_lock_client IS :expected",
            {"new": new_holder, "session": session_id, "expected": expected},
        )
        if cursor.rowcount != 1:
            return False
        conn.execute(
            "UPDATE connected_clients SET has_input_lock = (client_id IS :new) "
            "WHERE session_id = :session AND (has_input_lock = 1 OR client_id IS :new)",
            {"new": new_holder, "session": session_id},
        )
    return True


def record_input_lock(conn: sqlite3.Connection, session_id: str, holder: str | None) -> None:
    """Mirror the session's input-lock holder (None = nobody) in its row and in the
    has_input_lock flags of its clients, in one transaction.

    The running daemon's in-memory lock is the authority and its changes reach the one writer
    in order, so this sets rather than compares: a row removed meanwhile (remove_client) must
    not make the next change fail. At most one client of the session is flagged."""
    with transaction(conn):
        conn.execute("UPDATE sessions SET input_lock_client = ? WHERE id = ?", (holder, session_id))
        conn.execute(
            "UPDATE connected_clients SET has_input_lock = (client_id IS :holder) "
            "WHERE session_id = :session AND (has_input_lock = 1 OR client_id IS :holder)",
            {"holder": holder, "session": session_id},
        )
