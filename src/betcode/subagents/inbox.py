"""One approval inbox: a subagent's questions reach its parent session's clients.

Two halves. `ParentInbox` follows each run: while it runs, `relay_questions` copies every
permission event of its session (request, question, reminder, resolution) into its parent
session's log (`show_in_parent`), so the parent's stream, its replay and its chat show them —
each request's description already says which subagent and step asks (the bridge adds
`asker_label`). When the run ends (completed, failed or cancelled), its questions are closed to
answers and, once its claude has stopped, the ones nobody answered are withdrawn through the
bridge (settled `cancelled`, each audited, shown resolved in both sessions): an answer would
start that claude again, and nothing restarts a finished subagent (SAG-20). A run the last
daemon left without that end (killed: reconciliation failed the run) gets it at startup,
before any client is served.

`SubagentInbox` is the bridge's `Delegates`: it names the asker, routes a parent client's
answer to the subagent's session (the bridge's one pending store and its rules — first answer
wins, TTL, restart survival — apply unchanged), says when a subagent's questions are withdrawn,
and applies the subagent's auto-approve limits (delegation.py), auditing each decision. A call
its rate limit queues waits in a task of the subagent's run (cancelled when the run ends), asked
again each time the limit should have room.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.delegates import Delegated, Queued
from betcode.protocol.messages import CanUseTool, ControlRequest
from betcode.sessions.fanout import Frame
from betcode.sessions.manager import SessionManager, SessionNotFound
from betcode.sessions.session import Session
from betcode.storage import subagents as rows
from betcode.storage.audit import AuditEvent, AuditRecorder, EventType
from betcode.storage.reader import StoreReader
from betcode.subagents.audit import withdrawn_request_audit
from betcode.subagents.delegation import Decision, Verdict
from betcode.subagents.runner import Outcome, SubagentRun, why_ended
from betcode.v1 import agent_pb2

log = logging.getLogger(__name__)

MIRRORED = frozenset(
    {"permission_request", "user_question", "permission_resolved", "permission_reminder"}
)
DELEGATION_ACTOR = "subagent-delegation"
# A queued call asks again this long after its limit should have room (clock granularity).
QUEUE_SLACK_SECONDS = 0.05


async def relay_questions(child: Session, parent: Session, after_seq: int) -> None:
    """Copies the child's permission events after `after_seq` into the parent's log until
    cancelled (the subagent's run ended)."""
    stream = child.attach(
        f"inbox-{child.id}", after_seq, max_count=256, max_bytes=1 << 20, takes_input=False
    )
    async for batch in stream:
        show_in_parent(batch, parent)


def show_in_parent(frames: Sequence[Frame], parent: Session) -> None:
    """Copies the permission events among the child's `frames` into the parent's log (the
    relay's work, and the resolutions of a run's end, which come after the relay stopped)."""
    copies = []
    for _, payload in frames:
        event = agent_pb2.AgentEvent.FromString(payload)
        kind = event.WhichOneof("event")
        if kind not in MIRRORED:
            continue
        if kind in ("permission_request", "user_question") and getattr(event, kind).is_replay:
            continue  # a reminder to a client that just attached, not news
        event.sequence = 0
        event.ClearField("timestamp")
        copies.append(event)
    if copies:
        parent.emit(copies)


class ParentInbox:
    """Each run's questions in its parent's inbox, from its start to its end (the runs'
    `RunQuestions`)."""

    def __init__(self, sessions: SessionManager, bridge: PermissionBridge) -> None:
        self._sessions = sessions
        self._bridge = bridge
        self._relays: dict[str, asyncio.Task[None]] = {}

    def relay(self, run: SubagentRun, after_seq: int) -> None:
        """Copies the run's questions after `after_seq` to its parent until the run ends."""
        self._relays[run.id] = asyncio.create_task(
            self._relay(run, after_seq), name=f"inbox-{run.id}"
        )

    async def _relay(self, run: SubagentRun, after_seq: int) -> None:
        try:
            parent = await self._sessions.get(run.row.parent_session_id)
            await relay_questions(run.session, parent, after_seq)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("subagent %s: its questions no longer reach the parent", run.id)

    async def close(self, run: SubagentRun) -> None:
        await self._bridge.drain_answers(run.session.id)

    async def withdraw(self, run: SubagentRun, outcome: Outcome) -> int:
        await self._stop_relay(run.id)  # the resolutions below reach the parent directly
        message = why_ended(outcome.status, outcome.error)
        return await self._withdraw(run.row, run.session, message, outcome.ended_by)

    async def end_left_behind(self, row: rows.SubagentRow) -> int:
        """Startup: a run that ended without its end (reconciliation failed it) ends now as
        `close`/`withdraw` end a live one — its claude, re-attached under its holder, stopped
        (nothing supervises the run any more), then its questions withdrawn by the daemon."""
        session = await self._sessions.get(row.session_id)
        await session.supervisor.stop()
        return await self._withdraw(row, session, why_ended(row.status, row.error_message), None)

    async def _withdraw(
        self, row: rows.SubagentRow, session: Session, message: str, ended_by: str | None
    ) -> int:
        """The questions nobody answered, settled through the bridge and shown resolved in
        both sessions; how many."""
        resolved = await self._bridge.withdraw_all(
            session,
            message,
            lambda request: withdrawn_request_audit(row, request, message, ended_by),
        )
        if resolved:
            try:
                parent = await self._sessions.get(row.parent_session_id)
            except SessionNotFound:
                log.info("subagent %s: its parent session is gone", row.id)
            else:
                show_in_parent(resolved, parent)
        return len(resolved)

    async def stop_relays(self) -> None:
        """Daemon stop: the runs stop unrecorded, their questions wait for the next daemon."""
        for run_id in list(self._relays):
            await self._stop_relay(run_id)

    async def _stop_relay(self, run_id: str) -> None:
        relay = self._relays.pop(run_id, None)
        if relay is not None:
            relay.cancel()
            await asyncio.gather(relay, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class QueueWait:
    """How long a call waited in the rate limit's queue, and for which limit (audited)."""

    limit: str
    seconds: float


class SubagentInbox:
    """The permission bridge's `Delegates` for the daemon's subagents."""

    def __init__(
        self,
        runs: dict[str, SubagentRun],
        sessions: SessionManager,
        reader: StoreReader,
        audit: AuditRecorder,
        home: str,
    ) -> None:
        self._runs = runs  # by session id (SubagentManager keeps it)
        self._sessions = sessions
        self._reader = reader
        self._audit = audit
        self._home = home

    def asker_label(self, session_id: str) -> str | None:
        run = self._runs.get(session_id)
        return None if run is None else f"subagent {run.delegation.label}"

    async def decide(
        self, session: Session, request: ControlRequest, tool: CanUseTool
    ) -> Delegated | Queued | None:
        run = self._runs.get(session.id)
        if run is None:
            return None
        decision = self._decision(run, tool)
        if decision.verdict is Verdict.QUEUE:
            return Queued(run.hold_back(self._when_let_through(run, request, tool, decision)))
        return self._settle(run, request, tool, decision)

    def _decision(
        self, run: SubagentRun, tool: CanUseTool, queued_seconds: float = 0.0
    ) -> Decision:
        session = run.session
        return run.delegation.decide(
            tool.tool_name,
            tool.input,
            session.record.working_directory,
            self._home,
            session.translator.tools,
            queued_seconds,
        )

    async def _when_let_through(
        self, run: SubagentRun, request: ControlRequest, tool: CanUseTool, decision: Decision
    ) -> Delegated | None:
        """queue_on_rate_limit: the call asks again once its limit should have room, until
        it is decided (allowed; denied after MAX_QUEUE_SECONDS; the user's after a revoke)."""
        held_by, queued_seconds = decision.limit, 0.0
        while decision.verdict is Verdict.QUEUE:
            pause = decision.retry_after_seconds + QUEUE_SLACK_SECONDS
            await asyncio.sleep(pause)
            queued_seconds += pause
            decision = self._decision(run, tool, queued_seconds)
        return self._settle(run, request, tool, decision, QueueWait(held_by, queued_seconds))

    def _settle(
        self,
        run: SubagentRun,
        request: ControlRequest,
        tool: CanUseTool,
        decision: Decision,
        waited: QueueWait | None = None,
    ) -> Delegated | None:
        if decision.verdict is Verdict.FORWARD:
            return None
        self._audit_decision(run, request, tool, decision, waited)
        if decision.verdict is Verdict.ALLOW:
            run.delegation.note_approved(tool.tool_use_id)
            return Delegated(True)
        if decision.verdict is Verdict.EXPIRED:
            run.terminate(decision.reason)
        return Delegated(False, f"BetCode denied this call: {decision.reason}")

    def _audit_decision(
        self,
        run: SubagentRun,
        request: ControlRequest,
        tool: CanUseTool,
        decision: Decision,
        waited: QueueWait | None,
    ) -> None:
        event: EventType = {
            Verdict.ALLOW: "auto_approve_tool_call",
            Verdict.DENY: "rate_limit_exceeded",
            Verdict.UNKNOWN_TOOL: "tool_validation_fail",
        }.get(decision.verdict, "subagent_timeout")  # type: ignore[assignment]
        context = {"request_id": request.request_id, "reason": decision.reason, "mode": "auto"}
        if decision.limit:
            context["limit"] = decision.limit
        if waited is not None:
            context["queued_for"] = waited.limit
            context["queued_seconds"] = f"{waited.seconds:.1f}"
        self._audit.record(
            AuditEvent(
                event_type=event,
                actor_type="daemon",
                actor_id=DELEGATION_ACTOR,
                outcome="success" if decision.verdict is Verdict.ALLOW else "denied",
                severity="info" if decision.verdict is Verdict.ALLOW else "warn",
                session_id=run.session.id,
                subagent_id=run.id,
                parent_session_id=run.row.parent_session_id,
                tool_name=tool.tool_name,
                tool_input=tool.input,
                context=context,
            )
        )

    async def child_session(self, parent: Session, session_id: str) -> Session | None:
        row = await self._reader.read(lambda c: rows.parent_of_session(c, session_id))
        if row is None or row.parent_session_id != parent.id:
            return None
        return await self._sessions.get(session_id)

    async def child_session_ids(self, parent_session_id: str) -> list[str]:
        children = await self._reader.read(lambda c: rows.list_subagents(c, parent_session_id))
        return [child.session_id for child in children if child.status in rows.UNFINISHED]

    async def resumed_later(self, session_id: str) -> bool:
        if session_id in self._runs:
            return False
        row = await self._reader.read(lambda c: rows.parent_of_session(c, session_id))
        return row is not None and row.status in rows.UNFINISHED

    async def withdrawn(self, session_id: str) -> str | None:
        run = self._runs.get(session_id)
        if run is not None:  # live, or ending: its row is not final yet
            return None if run.ending is None else why_ended(run.ending.status, run.ending.error)
        row = await self._reader.read(lambda c: rows.parent_of_session(c, session_id))
        if row is None or row.status in rows.UNFINISHED:
            return None  # not a subagent's, or one of a plan waiting to be resumed
        return why_ended(row.status, row.error_message)
