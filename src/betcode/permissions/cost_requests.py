"""Cost requests: a session at a cost cap asks before its next turn (docs/LIMITS.md).

A user message that would start a turn past a cap is not sent: it waits, stored with its
question in `pending_permissions` like any forwarded request, under the tool name
`BetCode:CostLimit`, so every client that shows and answers tool approvals (the chat, the web
client, `permissions pending`, the upstream CLI, reminders and notifications) shows and
answers it too. Its input carries the held message and the numbers asked about.

Allowing it raises the session's cap (`storage.spend.raise_cap`), records the answer and claims
the held message in one transaction, then sends the message: exactly once, whichever client
answers, however often. Denying it, or letting it expire, leaves the message unsent and says
so. Nothing is ever written to claude for such a request: no process asked it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from betcode.config.settings import PermissionSettings
from betcode.permissions.decisions import (
    AnswerError,
    AnswerOutcome,
    ClientAnswer,
    Decision,
    Reply,
    answer_audit,
    outcome_of,
)
from betcode.permissions.metrics import DecisionCounters, DecisionKind
from betcode.permissions.sweeper import Clock
from betcode.protocol.messages import CanUseTool, Dialect
from betcode.sessions import translate
from betcode.sessions.session import Session
from betcode.storage import idempotency
from betcode.storage import pending as pending_rows
from betcode.storage import queued as queued_rows
from betcode.storage import spend as spend_rows
from betcode.storage.audit import AuditRecorder
from betcode.storage.pending import PendingPermission
from betcode.storage.writer import StoreWriter
from betcode.v1 import common_pb2

log = logging.getLogger(__name__)

COST_LIMIT_TOOL = pending_rows.NO_CLAUDE_ANSWER_TOOL
COST_LIMIT_NOT_SENT = "COST_LIMIT_NOT_SENT"
_ALLOWING = frozenset(
    {
        Decision.PERMISSION_DECISION_ALLOW_ONCE,
        Decision.PERMISSION_DECISION_ALLOW_SESSION,
        Decision.PERMISSION_DECISION_ALLOW_WITH_EDIT,
    }
)
_DENYING = frozenset(
    {
        Decision.PERMISSION_DECISION_DENY,
        Decision.PERMISSION_DECISION_DENY_NO_INTERRUPT,
        Decision.PERMISSION_DECISION_DENY_WITH_INTERRUPT,
    }
)

Scope = Literal["session", "day"]
SendHeld = Callable[[Session, str], Awaitable[None]]


def usd(amount: float) -> str:
    """Dollars as people read them; small amounts (a mock model's turn) keep their digits."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.6f}".rstrip("0").rstrip(".")


@dataclass(frozen=True, slots=True)
class CapReached:
    """What stops a session's next turn: its own cap (`session`) or the daemon's daily one."""

    scope: Scope
    spent_usd: float
    limit_usd: float
    step_usd: float  # what allowing adds
    day: str

    def question(self, session_id: str) -> str:
        if self.scope == "session":
            return (
                f"session {session_id} has spent {usd(self.spent_usd)} of its "
                f"{usd(self.limit_usd)} limit; allow another {usd(self.step_usd)}?"
            )
        return (
            f"the sessions have spent {usd(self.spent_usd)} of the {usd(self.limit_usd)} "
            f"limit for {self.day}; allow session {session_id} another {usd(self.step_usd)} "
            "today?"
        )


def is_cost_request(row: PendingPermission) -> bool:
    return row.tool_name == COST_LIMIT_TOOL


class CostRequests:
    """Asks and answers cost requests for the bridge; `send_held` (set by whoever admits turns)
    sends an allowed message."""

    def __init__(
        self,
        writer: StoreWriter,
        metrics: DecisionCounters,
        settings: PermissionSettings,
        clock: Clock,
        audit: AuditRecorder,
    ) -> None:
        self._writer = writer
        self._metrics = metrics
        self._settings = settings
        self._clock = clock
        self._audit = audit
        self.send_held: SendHeld | None = None

    def apply_settings(self, settings: PermissionSettings) -> None:
        self._settings = settings

    async def ask(
        self,
        session: Session,
        text: str,
        reached: CapReached,
        queued_id: int | None = None,
        *,
        idempotency_key: str = "",
    ) -> str:
        """Store the question with the held message, then show it; its request id. A queued
        message (`queued_id`) leaves the queue in the same transaction: held once, never lost
        nor queued again by a daemon killed meanwhile; so is the message's idempotency key
        recorded."""
        request_id = f"cost-{uuid.uuid4()}"
        now = self._clock()
        expires_at = now + self._settings.ttl_seconds
        question = reached.question(session.id)
        asked: dict[str, Any] = {
            "message": text,
            "scope": reached.scope,
            "spent_usd": reached.spent_usd,
            "limit_usd": reached.limit_usd,
            "step_usd": reached.step_usd,
            "day": reached.day,
        }

        def store(conn: sqlite3.Connection) -> None:
            pending_rows.insert_pending(
                conn,
                request_id=request_id,
                session_id=session.id,
                tool_name=COST_LIMIT_TOOL,
                input_json=json.dumps(asked),
                dialect=str(Dialect.STREAM_JSON),
                received_at=now,
                expires_at=expires_at,
                tool_description=question,
            )
            if queued_id is not None:
                queued_rows.remove(conn, [queued_id])
            if idempotency_key:
                idempotency.remember_key(conn, idempotency_key, session.id, now)

        await self._writer.call(store)
        log.info("session %s: %s (%s)", session.id, question, request_id)
        tool = CanUseTool(tool_name=COST_LIMIT_TOOL, input=asked, description=question)
        session.emit(
            [
                translate.permission_request_event(request_id, tool, expires_at=int(expires_at)),
                translate.status_event(
                    common_pb2.AgentStatus.AGENT_STATUS_WAITING_FOR_USER, question
                ),
            ]
        )
        session.background_write(lambda c: pending_rows.mark_forwarded(c, request_id, now))
        return request_id

    async def answer(
        self, session: Session, row: PendingPermission, answer: ClientAnswer
    ) -> AnswerOutcome:
        """First answer wins (as for tool approvals); an allow raises the cap and sends the
        held message once, a deny leaves it unsent and tells the session's clients."""
        if row.response_received:
            return AnswerOutcome(True, True, outcome_of(row.response_decision))
        now = self._clock()
        if row.expires_at <= now:
            raise AnswerError.stale(row.request_id)
        if answer.decision in _ALLOWING:
            reply = Reply("allow_once", "allowed", b"")
        elif answer.decision in _DENYING:
            message = answer.message.strip() or "the message was not sent"
            reply = Reply("deny", "denied", b"", message=message)
        else:
            raise AnswerError.invalid("a cost request is answered with an allow or a deny")
        asked: dict[str, Any] = json.loads(row.input)
        audit = answer_audit(row, reply, answer)

        def record(conn: sqlite3.Connection) -> bool:
            if not pending_rows.answer(
                conn, row.request_id, decision=reply.decision, payload="{}", now=now
            ):
                return False
            # Claimed with the answer: the held message is sent at most once.
            pending_rows.mark_delivered(conn, row.request_id)
            if reply.allows:
                spend_rows.raise_cap(
                    conn, session.id, asked["scope"], float(asked["step_usd"]), str(asked["day"])
                )
            self._audit.insert(conn, audit)
            return True

        if not await self._writer.call(record):
            current = await self._writer.call(lambda c: pending_rows.get_pending(c, row.request_id))
            decided = (current or row).response_decision
            return AnswerOutcome(True, True, outcome_of(decided))
        kind = DecisionKind.USER_ALLOW if reply.allows else DecisionKind.USER_DENY
        self._metrics.count(kind, row.tool_name, max(now - row.received_at, 0.0))
        resolved = translate.permission_resolved_event(
            row.request_id,
            reply.outcome,
            message=reply.message,
            decided_by_client_id=answer.client_id or "",
        )
        if not reply.allows:
            not_sent = f"{reply.message}: {row.tool_description or 'cost limit reached'}"
            session.emit(
                [
                    resolved,
                    translate.error_event(COST_LIMIT_NOT_SENT, not_sent),
                    translate.status_event(common_pb2.AgentStatus.AGENT_STATUS_IDLE, not_sent),
                ]
            )
            return AnswerOutcome(True, False, reply.outcome)
        session.emit([resolved])
        if self.send_held is None:
            log.error("session %s: no one sends the message %s held", session.id, row.request_id)
            return AnswerOutcome(True, False, reply.outcome)
        try:
            await self.send_held(session, str(asked["message"]))
        except Exception:
            # The answer stands; a message that cannot reach claude ends its turn visibly.
            log.exception("session %s: %s's message was not sent", session.id, row.request_id)
        return AnswerOutcome(True, False, reply.outcome)
