"""The permission bridge: claude's `can_use_tool` requests ⇄ rules, grants and the clients.

For each request, in order (the first that applies decides):

1. a deny rule (or deny session grant) matches → denied at once, the message naming the rule;
2. a one-shot grant (an approval that arrived after the asking process was gone, see
   `orphans`) covers exactly this call → allowed at once, with the approved input;
3. an ask rule matches → forwarded to the clients, even if an allow rule matches too;
4. allow rules, or allow rules together with session grants, cover the call → allowed at once;
5. a subagent's delegation (auto-approve within its limits, `delegates`) decides; a call its
   rate limit queues is answered (or forwarded) when the limit lets it through, meanwhile
   the session goes on reading claude;
6. otherwise → forwarded. AskUserQuestion is always forwarded.

A subagent's forwarded question says which subagent (and orchestration step) asks, and is
answered from its own session or from its parent's (one inbox; subagents.inbox shows it in the
parent's stream).

Automatic decisions produce no client event. Every decision is audited (`decisions.*_audit`),
an answer or expiry in the transaction that stores it. A forwarded request is stored in
`pending_permissions` BEFORE any client sees it, then shown to every client of the session; an
unanswered request for the same call whose process is gone (claude asks again after a restart)
is withdrawn at the same time, so the user never answers one question twice.
A client's answer is applied by `answers`: the first answer wins (a compare-and-swap in
SQLite); a duplicate answer succeeds and changes nothing. The stored row outlives clients,
claude processes and the daemon itself; `sweeper` reminds about it and finally expires it, and
any client activity in the session pushes its expiry back by one TTL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Sequence

import msgspec

from betcode.config.settings import PermissionSettings
from betcode.observability.logs import log_fields
from betcode.permissions import orphans
from betcode.permissions.answers import Answers
from betcode.permissions.decisions import AnswerOutcome, ClientAnswer, auto_audit
from betcode.permissions.delegates import Delegated, Delegates, Queued
from betcode.permissions.engine import Behavior, evaluate
from betcode.permissions.grants import GrantAction, SessionGrant
from betcode.permissions.live import LiveRequests
from betcode.permissions.metrics import DecisionCounters, DecisionKind
from betcode.permissions.notifier import Notifier
from betcode.permissions.rulebook import RuleBook
from betcode.permissions.sweeper import Clock, PermissionSweeper, SweepReport
from betcode.protocol import writer as stdin
from betcode.protocol.messages import CanUseTool, ControlRequest, Dialect
from betcode.sessions import translate
from betcode.sessions.fanout import Frame
from betcode.sessions.session import Session
from betcode.storage import grants as grant_rows
from betcode.storage import pending as pending_rows
from betcode.storage.audit import AuditRecorder
from betcode.storage.pending import PendingPermission
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.v1 import agent_pb2, common_pb2

log = logging.getLogger(__name__)

ASK_USER_QUESTION = "AskUserQuestion"


class PermissionBridge:
    """Implements the sessions' PermissionGate; AgentService calls `answer` / `list_pending`."""

    def __init__(
        self,
        writer: StoreWriter,
        reader: StoreReader,
        *,
        rules: RuleBook,
        settings: PermissionSettings | None = None,
        notifier: Notifier | None = None,
        audit: AuditRecorder | None = None,
        clock: Clock = time.time,
    ) -> None:
        self._writer = writer
        self._reader = reader
        self.rules = rules
        self.settings = settings if settings is not None else PermissionSettings()
        self._clock = clock
        self.metrics = DecisionCounters()
        self.delegates: Delegates | None = None  # set when subagents are served
        self._queued: dict[str, asyncio.Task[None]] = {}  # by request id: see _delegated
        self._audit = audit if audit is not None else AuditRecorder(writer, clock=clock)
        self._live = LiveRequests()
        self._notifier = (
            notifier if notifier is not None else Notifier(self.settings.notify_command)
        )
        self._answers = Answers(
            writer, reader, self._live, self.metrics, self.settings, clock, self._audit
        )
        self._sweeper = PermissionSweeper(
            writer, self._live, self._notifier, self.metrics, self.settings, clock, self._audit
        )

    # ---- from claude ----

    async def on_control_request(self, session: Session, request: ControlRequest) -> None:
        with log_fields(request_id=request.request_id):
            await self._on_control_request(session, request)

    async def _on_control_request(self, session: Session, request: ControlRequest) -> None:
        self._live.remember(session)
        tool = request.request
        if not isinstance(tool, CanUseTool):
            # BetCode registers no hooks or SDK MCP servers: say so, never leave claude waiting.
            await session.write_control(
                stdin.control_error(request.request_id, "not supported by BetCode", request.dialect)
            )
            return
        if tool.tool_name == ASK_USER_QUESTION or not await self._decided(session, request, tool):
            await self._forward(session, request, tool)

    async def _decided(self, session: Session, request: ControlRequest, tool: CanUseTool) -> bool:
        """Answer at once if a rule, a grant or a one-shot approval decides; False to forward."""
        ruleset = await self.rules.ruleset_for(session.record.working_directory)
        grants, undelivered = await self._reader.read(
            lambda c: (
                grant_rows.list_grants(c, session.id),
                pending_rows.list_undelivered(c, session.id),
            )
        )
        decision = evaluate(
            ruleset,
            tool.tool_name,
            tool.input,
            cwd=session.record.working_directory,
            home=self.rules.home,
            grants=[SessionGrant(g.tool_name, g.pattern, GrantAction(g.action)) for g in grants],
        )
        rules = "; ".join(rule.describe() for rule in decision.rules)
        if decision.behavior is Behavior.DENY:
            line = stdin.permission_deny(
                request.request_id, decision.message, dialect=request.dialect
            )
            await self._auto(session, request, tool, line, DecisionKind.AUTO_DENY, rules)
            return True
        if await self._use_one_shot(session, request, tool, undelivered):
            return True
        if decision.behavior is Behavior.ALLOW:
            line = stdin.permission_allow(request.request_id, dialect=request.dialect)
            await self._auto(session, request, tool, line, DecisionKind.AUTO_ALLOW, rules)
            return True
        if decision.behavior is Behavior.UNDECIDED and self.delegates is not None:
            return await self._delegated(session, request, tool, self.delegates)
        return False

    async def _delegated(
        self, session: Session, request: ControlRequest, tool: CanUseTool, delegates: Delegates
    ) -> bool:
        delegated = await delegates.decide(session, request, tool)
        if delegated is None:
            return False
        if isinstance(delegated, Queued):
            # Waited for off the session's line loop: its other lines, and a stop, go on.
            waiting = asyncio.create_task(
                self._answer_when_let_through(session, request, tool, delegated)
            )
            self._queued[request.request_id] = waiting
            waiting.add_done_callback(lambda _: self._queued.pop(request.request_id, None))
            return True
        await self._answer_delegated(session, request, tool, delegated)
        return True

    async def _answer_when_let_through(
        self, session: Session, request: ControlRequest, tool: CanUseTool, queued: Queued
    ) -> None:
        with log_fields(request_id=request.request_id):
            try:
                delegated = await queued.decision
                if delegated is None:
                    await self._forward(session, request, tool)
                else:
                    await self._answer_delegated(session, request, tool, delegated)
            except asyncio.CancelledError:
                log.info("session %s: queued %s withdrawn", session.id, request.request_id)
                raise
            except Exception:
                log.exception(
                    "session %s: the queued %s was not answered", session.id, request.request_id
                )

    async def _answer_delegated(
        self, session: Session, request: ControlRequest, tool: CanUseTool, delegated: Delegated
    ) -> None:
        kind = DecisionKind.AUTO_ALLOW if delegated.allow else DecisionKind.AUTO_DENY
        self.metrics.count(kind, tool.tool_name)
        line = (
            stdin.permission_allow(request.request_id, dialect=request.dialect)
            if delegated.allow
            else stdin.permission_deny(
                request.request_id, delegated.message, dialect=request.dialect
            )
        )
        await session.write_control(line)

    async def _auto(
        self,
        session: Session,
        request: ControlRequest,
        tool: CanUseTool,
        line: bytes,
        kind: DecisionKind,
        reason: str,
    ) -> None:
        self.metrics.count(kind, tool.tool_name)
        log.info("session %s: %s %s by %s", session.id, request.request_id, kind.value, reason)
        allowed = kind is DecisionKind.AUTO_ALLOW
        self._audit.record(auto_audit(session.id, request.request_id, tool, allowed, reason))
        await session.write_control(line)

    async def _use_one_shot(
        self,
        session: Session,
        request: ControlRequest,
        tool: CanUseTool,
        undelivered: Sequence[PendingPermission],
    ) -> bool:
        grant = orphans.one_shot_for(
            undelivered,
            tool.tool_name,
            tool.input,
            now=self._clock(),
            lifetime=self.settings.ttl_seconds,
        )
        if grant is None:
            return False
        if not await self._writer.call(lambda c: orphans.claim_delivery(c, grant.request_id)):
            return False  # consumed by a concurrent identical call
        line = stdin.permission_allow(
            request.request_id, updated_input=orphans.approved_input(grant), dialect=request.dialect
        )
        # Counted once already, as the user's answer; audited again as the call it let run.
        reason = f"the user's approval of {grant.request_id} (one-shot, now used)"
        log.info("session %s: %s allowed by %s", session.id, request.request_id, reason)
        self._audit.record(auto_audit(session.id, request.request_id, tool, True, reason))
        await session.write_control(line)
        return True

    async def _forward(self, session: Session, request: ControlRequest, tool: CanUseTool) -> None:
        label = self.delegates.asker_label(session.id) if self.delegates is not None else None
        if label is not None:
            said = tool.description or tool.decision_reason
            asks = f"{label} asks" + (f": {said}" if said else "")
            tool = msgspec.structs.replace(tool, description=asks)
        now = self._clock()
        expires_at = now + self.settings.ttl_seconds
        is_question = tool.tool_name == ASK_USER_QUESTION
        waiting = self._live.waiting_ids(session)

        def store(conn: sqlite3.Connection) -> list[str]:
            superseded = _supersede(conn, session.id, tool, waiting, now)
            pending_rows.insert_pending(
                conn,
                request_id=request.request_id,
                session_id=session.id,
                tool_name=tool.tool_name,
                input_json=json.dumps(tool.input),
                dialect=str(request.dialect),
                received_at=now,
                expires_at=expires_at,
                tool_description=tool.description or tool.decision_reason,
                tool_use_id=tool.tool_use_id,
                is_question=is_question,
            )
            return superseded

        superseded = await self._writer.call(store)
        self._live.add(session, request, tool)
        again = f"asked again as {request.request_id}"
        events = [
            translate.permission_resolved_event(old, "cancelled", message=again)
            for old in superseded
        ]
        parent = session.translator.parent_tool_use_id_of(tool.tool_use_id)
        events.append(
            translate.user_question_event(request.request_id, tool, parent_tool_use_id=parent)
            if is_question
            else translate.permission_request_event(
                request.request_id, tool, expires_at=int(expires_at), parent_tool_use_id=parent
            )
        )
        events.append(translate.status_event(common_pb2.AgentStatus.AGENT_STATUS_WAITING_FOR_USER))
        session.emit(events)
        session.background_write(lambda c: pending_rows.mark_forwarded(c, request.request_id, now))

    async def on_cancel(self, session: Session, request_id: str) -> None:
        queued = self._queued.pop(request_id, None)
        if queued is not None:
            queued.cancel()  # claude withdrew it: nothing is to answer it
        live = self._live.pop(session.id, request_id)
        now = self._clock()

        def record(conn: sqlite3.Connection) -> bool:
            won = pending_rows.answer(conn, request_id, decision="cancelled", payload="{}", now=now)
            return won and pending_rows.mark_delivered(conn, request_id)

        won = await self._writer.call(record)
        if live is not None or won:
            session.emit([translate.permission_resolved_event(request_id, "cancelled")])

    async def on_session_activity(self, session: Session) -> None:
        """Client activity (a user message, an attach, an answer) pushes back the expiry of the
        session's pending requests by one TTL."""
        self._live.remember(session)
        if self.settings.extend_on_activity:
            now, ttl = self._clock(), self.settings.ttl_seconds
            await self._writer.call(lambda c: pending_rows.extend_ttl(c, session.id, now, ttl))

    async def reattached(self, session: Session, claude_started_at: float) -> None:
        """After a daemon restart the session's claude still runs (under its holder): the
        requests it made, unanswered, wait on it again, so an answer goes to the process that
        asked (no resume note). Those made before it started are a gone process's (orphans)."""
        rows = await self._reader.read(lambda c: pending_rows.list_unanswered(c, session.id))
        for row in rows:
            if row.received_at < claude_started_at:
                continue
            tool = _tool_of(row)
            request = ControlRequest(
                request_id=row.request_id, request=tool, dialect=Dialect(row.dialect)
            )
            self._live.add(session, request, tool)
            log.info("session %s: %s waits on the same claude again", session.id, row.request_id)

    def has_pending(self, session_id: str) -> bool:
        return self._live.has_pending(session_id)

    async def replay_frames(self, session: Session, last_seq: int) -> list[Frame]:
        """Every still-pending request, flagged is_replay, for a client that just caught up."""
        await self.on_session_activity(session)
        asking = [session.id]
        if self.delegates is not None:
            asking += await self.delegates.child_session_ids(session.id)
        rows = await self._reader.read(
            lambda c: [row for s in asking for row in pending_rows.list_unanswered(c, s)]
        )
        frames: list[Frame] = []
        for row in rows:
            event = _event_for_row(row, is_replay=True)
            # A replayed request reuses the latest seq the client has seen: it is a reminder of
            # state, not a new event, and clients handle it idempotently by request id.
            event.sequence = last_seq
            frames.append((last_seq, event.SerializeToString()))
        return frames

    # ---- from clients ----

    async def answer(self, session: Session, answer: ClientAnswer) -> AnswerOutcome:
        """Apply a client's answer (`answers`): first answer wins; the answer reaches claude
        even if the process that asked is gone (see `orphans`)."""
        self._live.remember(session)
        with log_fields(request_id=answer.request_id):
            return await self._answers.apply(await self._asking_session(session, answer), answer)

    async def _asking_session(self, session: Session, answer: ClientAnswer) -> Session:
        """The session whose claude asked: `session`, or one of its subagents' sessions when
        the parent's client answers a subagent's question."""
        if self.delegates is None:
            return session
        row = await self.find_request(answer.request_id)
        if row is None or row.session_id == session.id:
            return session
        child = await self.delegates.child_session(session, row.session_id)
        return session if child is None else child

    async def list_pending(self, session_id: str | None) -> list[PendingPermission]:
        """Unanswered requests of one session, or of every session (None)."""
        return await self._reader.read(lambda c: pending_rows.list_unanswered(c, session_id))

    async def find_request(self, request_id: str) -> PendingPermission | None:
        """A stored request in any state (to tell a duplicate answer from an unknown id)."""
        return await self._reader.read(lambda c: pending_rows.get_pending(c, request_id))

    # ---- housekeeping ----

    def reload(self) -> None:
        """SIGHUP: permission rules are read again from the settings files when next needed."""
        self.rules.reload()

    def apply_settings(self, settings: PermissionSettings) -> None:
        """A settings reload: requests from now on get the new TTL; activity extends by it;
        reminders, expiry and the sweep interval follow from the next sweep."""
        self.settings = settings
        self._notifier.command = settings.notify_command
        self._answers.apply_settings(settings)
        self._sweeper.apply_settings(settings)

    async def run_sweeper(self, interval: float | None = None) -> None:
        """Reminders and expiry, every `interval` seconds (default: the configured interval,
        which a reload may change); runs until cancelled."""
        await self._sweeper.run(interval)

    async def sweep_once(self) -> SweepReport:
        return await self._sweeper.sweep_once()

    async def close(self) -> None:
        """Withdraw the calls still queued; wait for notify commands still running."""
        queued = list(self._queued.values())
        for waiting in queued:
            waiting.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
        await self._notifier.close()


def _supersede(
    conn: sqlite3.Connection,
    session_id: str,
    tool: CanUseTool,
    waiting: frozenset[str],
    now: float,
) -> list[str]:
    """Withdraw unanswered requests for this same call whose process is gone: claude asks
    again after a restart, and one question must not be shown (and answered) twice."""
    stale = [
        row.request_id
        for row in pending_rows.list_unanswered(conn, session_id)
        if row.request_id not in waiting
        and row.tool_name == tool.tool_name
        and orphans.same_call(json.loads(row.input), tool.input)
    ]
    for request_id in stale:
        pending_rows.answer(conn, request_id, decision="cancelled", payload="{}", now=now)
        pending_rows.mark_delivered(conn, request_id)
    return stale


def _tool_of(row: PendingPermission) -> CanUseTool:
    return CanUseTool(
        tool_name=row.tool_name,
        input=json.loads(row.input),
        tool_use_id=row.tool_use_id,
        description=row.tool_description,
    )


def _event_for_row(row: PendingPermission, *, is_replay: bool) -> agent_pb2.AgentEvent:
    tool = _tool_of(row)
    if row.is_question:
        return translate.user_question_event(row.request_id, tool, is_replay=is_replay)
    return translate.permission_request_event(
        row.request_id, tool, is_replay=is_replay, expires_at=int(row.expires_at)
    )
