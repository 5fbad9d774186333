"""A client's answer to a pending request: checked, recorded (first answer wins), delivered.

An answer is checked against the stored request, not against what this daemon process
remembers, so it works after a client, claude or the daemon itself restarted:

* an unknown request id, or one of another session → PERMISSION_NOT_FOUND;
* a request that already has a response (another client's answer, an expiry, a cancel) → a
  *duplicate*: accepted, changes nothing, and reports the outcome that was recorded;
* a request past its expiry that the sweeper has not reached yet → PERMISSION_STALE;
* a decision that does not fit the request (`decisions.build_reply`) → INVALID_ARGUMENT.

The answer, the session grant it makes (ALLOW_SESSION), the claim of delivery to a live process,
the TTL extension that any answer is and its audit row are one SQLite transaction; the answer is
a compare-and-swap on the row, so when two clients answer at once exactly one wins and the other
gets the duplicate result. Only the winner is counted, shown to the session's clients (with the
edited input, for ALLOW_WITH_EDIT, so every client and every replay shows the input that ran)
and written to claude: to the process that asked if it still waits, otherwise to whichever
claude resumes the conversation (`orphans`). A process that stops or exits between that check
and the write is gone as well: its claimed delivery is taken back and the answer takes the
same way, except for a subagent's (a subagent whose claude is gone is ending, and telling a
resumed claude would start its claude again for nothing).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
from collections.abc import Callable

from betcode.config.settings import PermissionSettings
from betcode.permissions import orphans
from betcode.permissions.decisions import (
    AnswerError,
    AnswerOutcome,
    ClientAnswer,
    Reply,
    answer_audit,
    build_reply,
    outcome_of,
)
from betcode.permissions.live import LiveRequests
from betcode.permissions.metrics import DecisionCounters, DecisionKind
from betcode.permissions.sweeper import Clock
from betcode.sessions import translate
from betcode.sessions.session import Session
from betcode.storage import grants as grant_rows
from betcode.storage import pending as pending_rows
from betcode.storage.audit import AuditEvent, AuditRecorder
from betcode.storage.pending import PendingPermission
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter

log = logging.getLogger(__name__)


class Answers:
    """Applies clients' answers for the bridge; shares its live requests, counters and audit."""

    def __init__(
        self,
        writer: StoreWriter,
        reader: StoreReader,
        live: LiveRequests,
        metrics: DecisionCounters,
        settings: PermissionSettings,
        clock: Clock,
        audit: AuditRecorder,
        is_subagent: Callable[[str], bool],
    ) -> None:
        self._writer = writer
        self._is_subagent = is_subagent  # by session id: a live subagent run's session
        self._reader = reader
        self._live = live
        self._metrics = metrics
        self._settings = settings
        self._clock = clock
        self._audit = audit

    def apply_settings(self, settings: PermissionSettings) -> None:
        """A reload: answers from now on extend the session's requests by the new TTL."""
        self._settings = settings

    async def apply(self, session: Session, answer: ClientAnswer) -> AnswerOutcome:
        """Check, record and deliver one answer (module doc); AnswerError if it cannot apply."""
        request_id = answer.request_id
        row = await self._reader.read(lambda c: pending_rows.get_pending(c, request_id))
        if row is None or row.session_id != session.id:
            raise AnswerError.not_found(request_id)
        if row.response_received:
            return _duplicate(row)
        now = self._clock()
        if row.expires_at <= now:
            raise AnswerError.stale(request_id)
        # claude's suggestions as stored with the request: the same whether the process that
        # asked still waits, was re-attached after a daemon restart, or is gone.
        reply = build_reply(row, answer, json.loads(row.permission_suggestions))
        asker = self._live.asker(session, request_id)
        audit = answer_audit(row, reply, answer)
        if not await self._writer.call(
            lambda c: self._record(c, session, row, reply, now, asker is not None, audit)
        ):
            current = await self._reader.read(lambda c: pending_rows.get_pending(c, request_id))
            return _duplicate(current or row)
        self._live.pop(session.id, request_id)
        allowed = reply.outcome in ("allowed", "answered")
        kind = DecisionKind.USER_ALLOW if allowed else DecisionKind.USER_DENY
        self._metrics.count(kind, row.tool_name, max(now - row.received_at, 0.0))
        await self._deliver(session, row, reply, answer, asker)
        return AnswerOutcome(accepted=True, duplicate=False, outcome=reply.outcome)

    def _record(
        self,
        conn: sqlite3.Connection,
        session: Session,
        row: PendingPermission,
        reply: Reply,
        now: float,
        waiting: bool,
        audit: AuditEvent,
    ) -> bool:
        """One transaction: the answer (if first), its session grant, `delivered` when the
        asking process is alive (claimed before writing: an approval runs at most once), the
        TTL extension that any answer is, and its audit row."""
        payload = reply.line.decode()
        if not pending_rows.answer(
            conn, row.request_id, decision=reply.decision, payload=payload, now=now
        ):
            return False
        grant = reply.grant
        if grant is not None:
            grant_rows.add_grant(
                conn, session.id, grant.tool_name, "allow", now, pattern=grant.pattern
            )
        if waiting:
            pending_rows.mark_delivered(conn, row.request_id)
        if self._settings.extend_on_activity:
            pending_rows.extend_ttl(conn, session.id, now, self._settings.ttl_seconds)
        self._audit.insert(conn, audit)
        return True

    async def _deliver(
        self,
        session: Session,
        row: PendingPermission,
        reply: Reply,
        answer: ClientAnswer,
        asker: int | None,
    ) -> None:
        """Show the recorded answer to the session's clients, then write it to claude: to
        process `asker` if it waits, else to a resumed claude (module doc)."""
        edited = answer.updated_input if reply.decision == "allow_with_edit" else None
        resolved = translate.permission_resolved_event(
            row.request_id,
            reply.outcome,
            message=answer.message,
            decided_by_client_id=answer.client_id or "",
            # Stored with the event: every client, and every replay, shows the input that ran.
            updated_input=edited,
        )
        session.emit([resolved])
        if asker is not None:
            if await session.write_control(reply.line, asker):
                return
            await self._writer.call(lambda c: pending_rows.mark_undelivered(c, row.request_id))
            if self._is_subagent(session.id):
                log.info(
                    "session %s: the subagent's claude that asked %s is gone; not resumed",
                    session.id,
                    row.request_id,
                )
                return
        answered = dataclasses.replace(
            row, response_decision=reply.decision, response_payload=reply.line.decode()
        )
        await orphans.tell_resumed_claude(session, answered, reply, answer.answers, self._writer)


def _duplicate(row: PendingPermission) -> AnswerOutcome:
    return AnswerOutcome(accepted=True, duplicate=True, outcome=outcome_of(row.response_decision))
