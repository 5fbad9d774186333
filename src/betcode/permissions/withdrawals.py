"""Requests nobody is to answer any more: settled as `cancelled` and shown resolved, never
written to claude.

claude withdraws a request (control_cancel_request) when it no longer waits for it; and every
unanswered request of a session whose claude was stopped for good (a cancelled subagent) is
withdrawn at once, since an answer would start that claude again (`orphans`). The row is
answered `cancelled` (a later client answer is a duplicate that changes nothing) and marked
delivered (no one-shot grant, no note to a resumed claude). A request asked again after a
restart is withdrawn the same way by forwarding.py, in the transaction that stores the new one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from betcode.permissions.live import LiveRequests
from betcode.permissions.sweeper import Clock
from betcode.sessions import translate
from betcode.sessions.fanout import Frame
from betcode.sessions.session import Session
from betcode.storage import pending as pending_rows
from betcode.storage.audit import AuditEvent, AuditRecorder
from betcode.storage.pending import PendingPermission
from betcode.storage.writer import StoreWriter

CANCELLED = "cancelled"  # the stored response_decision, and the outcome clients are shown


def settle_cancelled(conn: sqlite3.Connection, request_id: str, now: float) -> bool:
    """Answer the request `cancelled` and mark it delivered, if nothing answered it first."""
    won = pending_rows.answer(conn, request_id, decision=CANCELLED, payload="{}", now=now)
    return won and pending_rows.mark_delivered(conn, request_id)


class Withdrawals:
    """Settles withdrawn requests for the bridge; shares its live requests, clock and audit."""

    def __init__(
        self, writer: StoreWriter, live: LiveRequests, clock: Clock, audit: AuditRecorder
    ) -> None:
        self._writer = writer
        self._live = live
        self._clock = clock
        self._audit = audit

    async def on_cancel(self, session: Session, request_id: str) -> None:
        """claude withdrew `request_id`."""
        was_live = self._live.pop(session.id, request_id)
        now = self._clock()
        won = await self._writer.call(lambda c: settle_cancelled(c, request_id, now))
        if was_live or won:
            session.emit([translate.permission_resolved_event(request_id, CANCELLED)])

    async def withdraw_all(
        self,
        session: Session,
        message: str,
        audit_of: Callable[[PendingPermission], AuditEvent],
    ) -> list[Frame]:
        """Every unanswered request of `session`, whose claude is stopped for good: settled
        and audited (`audit_of` each) in one transaction, shown resolved with `message`. The
        resolutions as stored in the session's log, for whoever shows them elsewhere too."""
        now = self._clock()

        def record(conn: sqlite3.Connection) -> list[str]:
            settled = []
            for row in pending_rows.list_unanswered(conn, session.id):
                if settle_cancelled(conn, row.request_id, now):
                    self._audit.insert(conn, audit_of(row))
                    settled.append(row.request_id)
            return settled

        withdrawn = await self._writer.call(record)
        for request_id in withdrawn:
            self._live.pop(session.id, request_id)
        resolved = [
            translate.permission_resolved_event(request_id, CANCELLED, message=message)
            for request_id in withdrawn
        ]
        return session.emit(resolved)
