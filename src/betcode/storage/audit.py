"""The security audit trail (`audit_log`): what was decided, by whom.

A row never holds a tool's raw input: only its SHA-256 (`input_hash`, over canonical JSON so
equal inputs hash equally) and a preview of at most 256 characters from which anything that
looks like a secret has been cut (`observability.redaction.redact`). Error texts are redacted
too and cut to 1 KB. Each row expires `RETENTION_SECONDS` after it was made;
`AuditRecorder.run_retention` deletes expired rows every hour.

Rows are written by the single store writer, never on the event loop: `AuditRecorder.record`
queues the event and returns at once; a caller that already holds a writer transaction (a
permission answer and its audit row commit together) calls `insert` in it. Either way the row
is made on the writer thread. Every stored row is also logged (logger `betcode.audit`) without
its preview.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from betcode.observability.redaction import SCAN_CHARS, cap_utf8, preview_of, redact
from betcode.storage.database import Database
from betcode.storage.errors import StorageError, StoreClosed
from betcode.storage.writer import StoreWriter

log = logging.getLogger("betcode.audit")

EventType = Literal[
    "auto_approve_tool_call",
    "permission_grant",
    "permission_deny",
    "permission_revoke",
    "subagent_spawn",
    "subagent_complete",
    "subagent_fail",
    "subagent_cancel",
    "subagent_timeout",
    "session_create",
    "session_resume",
    "session_complete",
    "session_error",
    "rate_limit_exceeded",
    "tool_validation_fail",
    "auth_success",
    "auth_failure",
]
Severity = Literal["debug", "info", "warn", "error", "critical"]
ActorType = Literal["user", "daemon", "subagent", "system"]
Outcome = Literal["success", "failure", "denied", "timeout"]

DAY = 86_400
# SEC-11 keeps decisions, lifecycle and auth events 90-365 days; every type BetCode records
# today falls under that floor.
RETENTION_SECONDS = 90 * DAY
RETENTION_INTERVAL_SECONDS = 3600.0
MAX_ERROR_MESSAGE_BYTES = 1024  # and each free-text context value
# Columns a usable audit_log must have (the daemon refuses to start without them, STO-05).
REQUIRED_COLUMNS = frozenset(
    {
        "event_id",
        "event_type",
        "severity",
        "session_id",
        "actor_type",
        "actor_id",
        "tool_name",
        "tool_input_hash",
        "tool_input_preview",
        "outcome",
        "error_code",
        "error_message",
        "context",
        "created_at",
        "expires_at",
    }
)

Clock = Callable[[], float]
# Context members holding ids and hashes are kept as they are (a SHA-256 looks like a key to
# `redact`); every other context value is free text and is redacted.
_IDENTIFIER_SUFFIXES = ("_id", "_hash")


class AuditLogMissing(StorageError):
    """The database has no usable audit_log table; the daemon must not run without one."""


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """What happened. `tool_input` is only hashed and previewed; it is never stored."""

    event_type: EventType
    actor_type: ActorType
    actor_id: str
    outcome: Outcome
    severity: Severity = "info"
    session_id: str | None = None
    tool_name: str | None = None
    tool_input: Mapping[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None
    context: Mapping[str, str] = field(default_factory=dict)  # stored as a JSON object
    subagent_id: str | None = None
    parent_session_id: str | None = None


class AuditRow(NamedTuple):
    """One audit_log row; field order is the INSERT column order."""

    event_id: str
    event_type: str
    severity: str
    session_id: str | None
    actor_type: str
    actor_id: str
    tool_name: str | None
    tool_input_hash: str | None
    tool_input_preview: str | None
    outcome: str
    error_code: str | None
    error_message: str | None
    context: str | None
    created_at: float
    expires_at: float
    subagent_id: str | None = None
    parent_session_id: str | None = None


INSERT_AUDIT = (
    "INSERT INTO audit_log (event_id, event_type, severity, session_id, actor_type, actor_id, "
    "tool_name, tool_input_hash, tool_input_preview, outcome, error_code, error_message, "
    "context, created_at, expires_at, subagent_id, parent_session_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def uuid7(now: float | None = None) -> str:
    """A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, variant 10, 74 random bits;
    ids made later sort later (to the millisecond)."""
    millis = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a, rand_b = rand >> 68, rand & ((1 << 62) - 1)
    value = (millis << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return str(uuid.UUID(int=value))


def input_hash(tool_input: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the input as canonical JSON: sorted keys, no spaces, UTF-8."""
    canonical = json.dumps(
        tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def audit_row(event: AuditEvent, now: float) -> AuditRow:
    """The stored form of `event` made at `now` (pure apart from the event id's random bits)."""
    tool_input = event.tool_input
    error = event.error_message
    context = {
        key: value if key.endswith(_IDENTIFIER_SUFFIXES) else _clean(value)
        for key, value in event.context.items()
    }
    return AuditRow(
        event_id=uuid7(now),
        event_type=event.event_type,
        severity=event.severity,
        session_id=event.session_id,
        actor_type=event.actor_type,
        actor_id=event.actor_id,
        tool_name=event.tool_name,
        tool_input_hash=None if tool_input is None else input_hash(tool_input),
        tool_input_preview=None if tool_input is None else preview_of(tool_input),
        outcome=event.outcome,
        error_code=event.error_code,
        error_message=None if error is None else _clean(error),
        context=json.dumps(context, sort_keys=True, ensure_ascii=False) if context else None,
        created_at=now,
        expires_at=now + RETENTION_SECONDS,
        subagent_id=event.subagent_id,
        parent_session_id=event.parent_session_id,
    )


def _clean(text: str) -> str:
    """Free text for a row: redacted (only its start is looked at) and at most 1 KB."""
    return cap_utf8(redact(text[:SCAN_CHARS]), MAX_ERROR_MESSAGE_BYTES)


def insert_audit(conn: sqlite3.Connection, row: AuditRow) -> None:
    conn.execute(INSERT_AUDIT, row)


def delete_expired(conn: sqlite3.Connection, now: float) -> int:
    """Delete rows whose retention has run out; return how many went."""
    return conn.execute("DELETE FROM audit_log WHERE expires_at < ?", (now,)).rowcount


def require_audit_log(database: Database) -> None:
    """Raise AuditLogMissing unless audit_log exists with every column the recorder writes
    (STO-05: the daemon does not run without its audit trail)."""
    conn = database.connect(query_only=True)
    try:
        columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(audit_log)")}
    finally:
        conn.close()
    if not columns:
        problem = "has no audit_log table"
    elif missing := REQUIRED_COLUMNS - columns:
        problem = f"has an audit_log table without the columns {', '.join(sorted(missing))}"
    else:
        return
    raise AuditLogMissing(
        f"the database {database.path} {problem}, so the security audit trail cannot be kept "
        "and the daemon does not start. Restore the database from a backup, or move the file "
        "aside to start with a new, empty one."
    )


class AuditRecorder:
    """Writes audit rows through the store writer; create it on the event loop."""

    def __init__(self, writer: StoreWriter, *, clock: Clock = time.time) -> None:
        self._writer = writer
        self._clock = clock
        self._in_flight: set[asyncio.Task[None]] = set()

    def insert(self, conn: sqlite3.Connection, event: AuditEvent) -> AuditRow:
        """Make `event`'s row now and insert it (on the writer thread, in the caller's
        transaction: hashing and redaction never run on the event loop), and log it."""
        row = audit_row(event, self._clock())
        insert_audit(conn, row)
        log.info(
            "audit %s %s: %s%s by %s:%s%s (event %s)",
            row.event_type,
            row.outcome,
            f"session {row.session_id}" if row.session_id else "daemon",
            f" {row.tool_name}" if row.tool_name else "",
            row.actor_type,
            row.actor_id,
            f" [{row.error_code}]" if row.error_code else "",
            row.event_id,
        )
        return row

    def record(self, event: AuditEvent) -> None:
        """Queue the event on the writer; never blocks, never raises."""
        try:
            task = asyncio.ensure_future(self._write(event))
        except RuntimeError:
            log.error("audit %s not stored: no event loop", event.event_type)
            return
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _write(self, event: AuditEvent) -> None:
        try:
            await self._writer.call(lambda conn: self.insert(conn, event))
        except StoreClosed:
            log.error("audit %s not stored: the store is closed", event.event_type)
        except Exception as exc:
            log.error("audit %s not stored: %s", event.event_type, exc)

    async def flush(self) -> None:
        """Wait until every row queued so far is written (or has failed)."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight)

    async def purge_expired(self) -> int:
        now = self._clock()
        removed = await self._writer.call(lambda conn: delete_expired(conn, now))
        if removed:
            log.info("audit retention: %d expired rows deleted", removed)
        return removed

    async def run_retention(self, interval: float = RETENTION_INTERVAL_SECONDS) -> None:
        """Delete expired rows now and every `interval` seconds, until cancelled or the store
        closes."""
        while True:
            try:
                await self.purge_expired()
            except StoreClosed:
                return
            except Exception:
                log.exception("audit retention failed; trying again in %g s", interval)
            await asyncio.sleep(interval)
