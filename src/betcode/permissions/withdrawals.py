"""Requests nobody is to answer any more: settled as `cancelled` and shown resolved, never
written to claude.

claude withdraws a request (control_cancel_request) when it no longer waits for it. The row is
answered `cancelled` (a later client answer is a duplicate that changes nothing) and marked
delivered (no one-shot grant, no note to a resumed claude). A request asked again after a
restart is withdrawn the same way by forwarding.py, in the transaction that stores the new one.
"""

from __future__ import annotations

import sqlite3

from betcode.permissions.live import LiveRequests
from betcode.permissions.sweeper import Clock
from betcode.sessions import translate
from betcode.sessions.session import Session
from betcode.storage import pending as pending_rows
from betcode.storage.writer import StoreWriter

CANCELLED = "cancelled"  # the stored response_decision, and the outcome clients are shown


def settle_cancelled(conn: sqlite3.Connection, request_id: str, now: float) -> bool:
    """Answer the request `cancelled` and mark it delivered, if nothing answered it first."""
    won = pending_rows.answer(conn, request_id, decision=CANCELLED, payload="{}", now=now)
    return won and pending_rows.mark_delivered(conn, request_id)


class Withdrawals:
    """Settles withdrawn requests for the bridge; shares its live requests and clock."""

    def __init__(self, writer: StoreWriter, live: LiveRequests, clock: Clock) -> None:
        self._writer = writer
        self._live = live
        self._clock = clock

    async def on_cancel(self, session: Session, request_id: str) -> None:
        """claude withdrew `request_id`."""
        live = self._live.pop(session.id, request_id)
        now = self._clock()
        won = await self._writer.call(lambda c: settle_cancelled(c, request_id, now))
        if live is not None or won:
            session.emit([translate.permission_resolved_event(request_id, CANCELLED)])
