"""The background sweep over pending requests: reminders, then expiry.

Every `interval` seconds (5 min by default): each unanswered request older than a reminder
age (1 h and 24 h by default) gets that reminder once (a request overdue for both gets only
the later one); each unanswered request past its expiry gets the soft deny
"Permission request expired after {TTL}. User can retry the operation.", recorded as
`expired`, counted as a timeout, audited (permission_deny, outcome timeout) in the same
transaction, and announced to the session's clients.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from betcode.config.settings import PermissionSettings
from betcode.permissions.decisions import expiry_audit, expiry_reply
from betcode.permissions.live import LiveRequests
from betcode.permissions.metrics import DecisionCounters, DecisionKind
from betcode.permissions.notifier import Notifier, ReminderNotice
from betcode.sessions import translate
from betcode.storage import pending as pending_rows
from betcode.storage.audit import AuditRecorder
from betcode.storage.errors import StoreClosed
from betcode.storage.pending import PendingPermission, Reminder
from betcode.storage.writer import StoreWriter

log = logging.getLogger(__name__)

Clock = Callable[[], float]
# The store keeps one "sent" flag per tier: the configured reminder ages map onto them in order.
REMINDER_FLAGS = (Reminder.ONE_HOUR, Reminder.ONE_DAY)


@dataclass(frozen=True, slots=True)
class SweepReport:
    reminded: int
    expired: int


class PermissionSweeper:
    def __init__(
        self,
        writer: StoreWriter,
        live: LiveRequests,
        notifier: Notifier,
        metrics: DecisionCounters,
        settings: PermissionSettings,
        clock: Clock,
        audit: AuditRecorder,
    ) -> None:
        self._writer = writer
        self._audit = audit
        self._live = live
        self._notifier = notifier
        self._metrics = metrics
        self._clock = clock
        self.apply_settings(settings)

    def apply_settings(self, settings: PermissionSettings) -> None:
        """New reminder ages, expiry text and interval (a reload), used from the next sweep."""
        self._settings = settings
        ages = settings.reminder_seconds
        if len(ages) > len(REMINDER_FLAGS):
            log.warning(
                "only the first %d reminder times are used; %s ignored",
                len(REMINDER_FLAGS),
                ", ".join(f"{age:g} s" for age in ages[len(REMINDER_FLAGS) :]),
            )
        self._tiers = tuple(zip(REMINDER_FLAGS, ages, strict=False))

    async def run(self, interval: float | None = None) -> None:
        """Sweep now and then every `interval` seconds (default: the configured interval, read
        again after each sweep), until cancelled or the store closes."""
        while True:
            pause = interval or self._settings.sweep_interval_seconds
            try:
                await self.sweep_once()
            except StoreClosed:
                return
            except Exception:
                log.exception("permission sweep failed; trying again in %g s", pause)
            await asyncio.sleep(pause)

    async def sweep_once(self) -> SweepReport:
        now = self._clock()
        due = await self._writer.call(lambda c: self._claim_reminders(c, now))
        for row, age in due:
            self._remind(row, now)
            log.debug("reminder tier %g s sent for %s", age, row.request_id)
        expired = await self._writer.call(lambda c: pending_rows.expired(c, now))
        count = 0
        for row in expired:
            count += await self._expire(row, now)
        return SweepReport(len(due), count)

    def _claim_reminders(
        self, conn: sqlite3.Connection, now: float
    ) -> list[tuple[PendingPermission, float]]:
        """Due reminders, marked sent in the same transaction: one per request, the latest
        tier it is due for (flags of earlier tiers are set without a reminder of their own)."""
        latest: dict[str, tuple[PendingPermission, float]] = {}
        for flag, age in self._tiers:
            # The store's query knows only the flag's nominal age: shift `now` so that it
            # selects requests received more than `age` seconds ago.
            for row in pending_rows.due_reminders(conn, flag, now - age + flag.age_seconds):
                pending_rows.mark_reminder_sent(conn, row.request_id, flag)
                latest[row.request_id] = (row, age)
        return list(latest.values())

    def _remind(self, row: PendingPermission, now: float) -> None:
        notice = ReminderNotice(
            request_id=row.request_id,
            session_id=row.session_id,
            tool_name=row.tool_name,
            description=row.tool_description or "",
            input_json=row.input,
            waiting_seconds=int(now - row.received_at),
            expires_at=int(row.expires_at),
        )
        self._notifier.remind(notice, self._live.session(row.session_id))

    async def _expire(self, row: PendingPermission, now: float) -> int:
        reply = expiry_reply(row, self._settings.ttl_seconds)
        session = self._live.session(row.session_id)
        asker = None if session is None else self._live.asker(session, row.request_id)
        audit = expiry_audit(row, reply)

        def record(conn: sqlite3.Connection) -> bool:
            won = pending_rows.answer(
                conn, row.request_id, decision=reply.decision, payload=reply.line.decode(), now=now
            )
            if not won:
                return False
            self._audit.insert(conn, audit)
            # Delivered either way: written below to the process that waits, or nobody waits
            # (a process resuming the conversation found the call interrupted).
            return pending_rows.mark_delivered(conn, row.request_id)

        if not await self._writer.call(record):
            return 0  # answered meanwhile: the answer won
        self._live.pop(row.session_id, row.request_id)
        self._metrics.count(DecisionKind.TIMEOUT, row.tool_name, max(now - row.received_at, 0.0))
        log.info("permission request %s (%s): %s", row.request_id, row.tool_name, reply.message)
        if session is None:
            return 1
        if asker is not None and not await session.write_control(reply.line, asker):
            # Its claude stopped or exited during the sweep: nobody waits for the deny any more.
            log.info("permission request %s: the claude that asked is gone", row.request_id)
        session.emit(
            [
                translate.permission_resolved_event(
                    row.request_id, reply.outcome, message=reply.message
                )
            ]
        )
        return 1
