"""The `pending_permissions` table: durable permission requests (docs/ARCHITECTURE.md#glossary,
"request").

A request is stored before any client sees it. Answering is a compare-and-swap, so of two
racing answers exactly one wins. `delivered` records whether the answer reached a live claude,
so after a restart the bridge knows which answers still have to be written.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any


@dataclass(frozen=True, slots=True)
class PendingPermission:
    request_id: str
    session_id: str
    tool_name: str
    tool_description: str | None
    input: str  # JSON text of the tool input, as claude sent it
    tool_use_id: str | None
    dialect: str  # the NDJSON dialect the request came in, to answer in the same one
    is_question: bool  # AskUserQuestion: answered with updatedInput.answers, never auto-resolved
    received_at: float
    forwarded_at: float | None  # first time a client was shown it
    expires_at: float
    last_extended_at: float | None
    extension_count: int
    reminder_1h_sent: bool
    reminder_24h_sent: bool
    push_notification_id: str | None
    response_received: bool
    response_decision: str | None  # e.g. allow_once, allow_session, deny, expired
    response_payload: str | None  # JSON of the answer to write to claude
    response_at: float | None
    delivered: bool
    permission_suggestions: str = "[]"  # JSON array: claude's own, they scope ALLOW_SESSION


class Reminder(Enum):
    """A reminder tier: the flag column that stops repeats and the age that makes it due."""

    ONE_HOUR = ("reminder_1h_sent", 3600)
    ONE_DAY = ("reminder_24h_sent", 86_400)

    @property
    def column(self) -> str:
        return str(self.value[0])

    @property
    def age_seconds(self) -> int:
        return int(self.value[1])


# The tool name of requests no claude asked, whose answers are never written to one: a cost
# request (permissions.cost_requests).
NO_CLAUDE_ANSWER_TOOL = "BetCode:CostLimit"

_COLUMNS = (
    "request_id, session_id, tool_name, tool_description, input, tool_use_id, dialect, "
    "is_question, received_at, forwarded_at, expires_at, last_extended_at, extension_count, "
    "reminder_1h_sent, reminder_24h_sent, push_notification_id, response_received, "
    "response_decision, response_payload, response_at, delivered, permission_suggestions"
)
_SELECT = f"SELECT {_COLUMNS} FROM pending_permissions"
_ORDER = " ORDER BY received_at, rowid"
_BOOLEAN_POSITIONS = frozenset(
    position for position, field in enumerate(fields(PendingPermission)) if field.type == "bool"
)


def _from_row(row: tuple[Any, ...]) -> PendingPermission:
    values: list[Any] = [
        bool(value) if i in _BOOLEAN_POSITIONS else value for i, value in enumerate(row)
    ]
    return PendingPermission(*values)


def insert_pending(
    conn: sqlite3.Connection,
    *,
    request_id: str,
    session_id: str,
    tool_name: str,
    input_json: str,
    dialect: str,
    received_at: float,
    expires_at: float,
    tool_description: str | None = None,
    tool_use_id: str | None = None,
    is_question: bool = False,
    permission_suggestions: str = "[]",
) -> bool:
    """Store a new request; False if this request_id is already stored (left unchanged)."""
    cursor = conn.execute(
        "INSERT INTO pending_permissions (request_id, session_id, tool_name, tool_description, "
        "input, tool_use_id, dialect, is_question, received_at, expires_at, "
        "permission_suggestions) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (request_id) DO NOTHING",
        (
            request_id,
            session_id,
            tool_name,
            tool_description,
            input_json,
            tool_use_id,
            dialect,
            int(is_question),
            received_at,
            expires_at,
            permission_suggestions,
        ),
    )
    return cursor.rowcount == 1


def get_pending(conn: sqlite3.Connection, request_id: str) -> PendingPermission | None:
    row = conn.execute(f"{_SELECT} WHERE request_id = ?", (request_id,)).fetchone()
    return None if row is None else _from_row(row)


def list_unanswered(
    conn: sqlite3.Connection, session_id: str | None = None
) -> list[PendingPermission]:
    """Unanswered requests of one session (or of all), in the order they were received."""
    if session_id is None:
        rows = conn.execute(f"{_SELECT} WHERE response_received = 0{_ORDER}")
    else:
        rows = conn.execute(
            f"{_SELECT} WHERE response_received = 0 AND session_id = ?{_ORDER}", (session_id,)
        )
    return [_from_row(row) for row in rows]


def list_undelivered(
    conn: sqlite3.Connection, session_id: str | None = None
) -> list[PendingPermission]:
    """Answered requests whose answer has not reached a live claude yet, oldest first."""
    condition = "response_received = 1 AND delivered = 0"
    if session_id is None:
        rows = conn.execute(f"{_SELECT} WHERE {condition}{_ORDER}")
    else:
        rows = conn.execute(
            f"{_SELECT} WHERE {condition} AND session_id = ?{_ORDER}", (session_id,)
        )
    return [_from_row(row) for row in rows]


def answers_written_since(conn: sqlite3.Connection, session_id: str, since: float) -> list[bytes]:
    """The answer lines written (or being written) to the claude that asked, for requests
    received since `since`: a daemon that re-attaches to a claude started then sends them
    again, in case the one before it died with an answer recorded but not yet handed over."""
    rows = conn.execute(
        "SELECT response_payload FROM pending_permissions WHERE session_id = ? "
        "AND received_at >= ? AND response_received = 1 AND delivered = 1 "
        "AND response_decision != 'cancelled' AND response_payload IS NOT NULL "
        f"AND tool_name != ?{_ORDER}",
        (session_id, since, NO_CLAUDE_ANSWER_TOOL),
    )
    return [_line(payload) for (payload,) in rows]


def request_ids_since(conn: sqlite3.Connection, session_id: str, since: float) -> set[str]:
    """The session's stored requests (in any state) received since `since`."""
    rows = conn.execute(
        "SELECT request_id FROM pending_permissions WHERE session_id = ? AND received_at >= ?",
        (session_id, since),
    )
    return {str(request_id) for (request_id,) in rows}


def control_lines_since(
    conn: sqlite3.Connection, session_id: str, since: float, through_sequence: int | None = None
) -> list[tuple[str, bytes]]:
    """(direction, line) of the control lines read from ('out') and written to ('in') the
    session's claude since `since` (up to line `through_sequence`), in order: what a daemon
    re-attaching to a claude started then finds asked and answered."""
    rows = conn.execute(
        "SELECT direction, CAST(payload AS BLOB) FROM messages WHERE session_id = ? "
        "AND created_at >= ? AND (? IS NULL OR sequence <= ?) AND message_type IN "
        "('control_request', 'control_cancel_request', 'control_response') ORDER BY sequence",
        (session_id, since, through_sequence, through_sequence),
    )
    return [(str(direction), bytes(line)) for direction, line in rows]


def _line(payload: str) -> bytes:
    line = payload.encode()
    return line if line.endswith(b"\n") else line + b"\n"


def mark_forwarded(conn: sqlite3.Connection, request_id: str, now: float) -> bool:
    """Record that a client was shown the request; the first time is kept."""
    cursor = conn.execute(
        "UPDATE pending_permissions SET forwarded_at = COALESCE(forwarded_at, ?) "
        "WHERE request_id = ?",
        (now, request_id),
    )
    return cursor.rowcount == 1


def answer(
    conn: sqlite3.Connection, request_id: str, *, decision: str, payload: str, now: float
) -> bool:
    """Record the answer if none was recorded yet; True only for the call that won.

    False means the request is unknown or was already answered (first answer wins); the
    caller can `get_pending` to tell which.
    """
    cursor = conn.execute(
        "UPDATE pending_permissions SET response_received = 1, response_decision = ?, "
        "response_payload = ?, response_at = ? WHERE request_id = ? AND response_received = 0",
        (decision, payload, now, request_id),
    )
    return cursor.rowcount == 1


def mark_delivered(conn: sqlite3.Connection, request_id: str) -> bool:
    """Record that the answer was written to a live claude."""
    cursor = conn.execute(
        "UPDATE pending_permissions SET delivered = 1 "
        "WHERE request_id = ? AND response_received = 1",
        (request_id,),
    )
    return cursor.rowcount == 1


def mark_undelivered(conn: sqlite3.Connection, request_id: str) -> bool:
    """Take back `mark_delivered`: the claude the answer was claimed for exited before it
    was written."""
    cursor = conn.execute(
        "UPDATE pending_permissions SET delivered = 0 WHERE request_id = ? AND delivered = 1",
        (request_id,),
    )
    return cursor.rowcount == 1


def extend_ttl(conn: sqlite3.Connection, session_id: str, now: float, ttl_seconds: float) -> int:
    """Push back the expiry of a session's unanswered, unexpired requests;
    return how many were extended."""
    cursor = conn.execute(
        "UPDATE pending_permissions SET expires_at = :now + :ttl, last_extended_at = :now, "
        "extension_count = extension_count + 1 "
        "WHERE session_id = :session AND response_received = 0 AND expires_at > :now",
        {"now": now, "ttl": ttl_seconds, "session": session_id},
    )
    return cursor.rowcount


def due_reminders(
    conn: sqlite3.Connection, reminder: Reminder, now: float
) -> list[PendingPermission]:
    """Unanswered requests older than the tier's age whose reminder was not sent yet."""
    rows = conn.execute(
        f"{_SELECT} WHERE response_received = 0 AND {reminder.column} = 0 "
        f"AND received_at < ?{_ORDER}",
        (now - reminder.age_seconds,),
    )
    return [_from_row(row) for row in rows]


def mark_reminder_sent(conn: sqlite3.Connection, request_id: str, reminder: Reminder) -> bool:
    cursor = conn.execute(
        f"UPDATE pending_permissions SET {reminder.column} = 1 WHERE request_id = ?",
        (request_id,),
    )
    return cursor.rowcount == 1


def expired(conn: sqlite3.Connection, now: float) -> list[PendingPermission]:
    """Unanswered requests whose expiry has passed, oldest first (answer them 'expired')."""
    rows = conn.execute(
        f"{_SELECT} WHERE response_received = 0 AND expires_at <= ?{_ORDER}", (now,)
    )
    return [_from_row(row) for row in rows]


def mark_pushed(conn: sqlite3.Connection, request_id: str, notification_id: str) -> None:
    """Records that a Web Push went out for the request (betcode.push): a restarted daemon does
    not push it again."""
    conn.execute(
        "UPDATE pending_permissions SET push_notification_id = ? "
        "WHERE request_id = ? AND push_notification_id IS NULL",
        (notification_id, request_id),
    )
