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
parent's stream, and `list_pending` lists it with the parent's). Once its run ends, or starts
ending, the delegates say its questions are
withdrawn: an answer is refused (PERMISSION_WITHDRAWN), since it would start the subagent's
stopped claude again. Answers to one session are applied one at a time, so `drain_answers` can
wait out those already past that check before the run stops its claude.

Steps 1, 2, 4 and 5 are `automatic`'s: no client event. Every decision is audited
(`decisions.*_audit`), an answer or expiry in the transaction that stores it. `forwarding`
stores a forwarded request BEFORE any client sees it; `withdrawals` settles the ones claude
withdraws. A client's answer is applied by `answers`: the first answer wins (a compare-and-swap
in SQLite); a duplicate answer succeeds and changes nothing. The stored row outlives clients,
claude processes and the daemon itself; `sweeper` reminds about it and finally expires it, and
any client activity in the session pushes its expiry back by one TTL.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import weakref
from collections.abc import Callable

from betcode.config.settings import PermissionSettings
from betcode.observability.logs import log_fields
from betcode.permissions.answers import Answers
from betcode.permissions.automatic import AutomaticDecisions
from betcode.permissions.cost_requests import CapReached, CostRequests, is_cost_request
from betcode.permissions.decisions import AnswerError, AnswerOutcome, ClientAnswer
from betcode.permissions.delegates import Delegates
from betcode.permissions.forwarding import ASK_USER_QUESTION, Forwarding
from betcode.permissions.live import LiveRequests
from betcode.permissions.metrics import DecisionCounters
from betcode.permissions.notifier import Notifier
from betcode.permissions.rulebook import RuleBook
from betcode.permissions.sweeper import Clock, PermissionSweeper, SweepReport
from betcode.permissions.unanswered import LeftUnanswered, unanswered_requests
from betcode.permissions.withdrawals import CANCELLED, Withdrawals
from betcode.protocol import writer as stdin
from betcode.protocol.messages import CanUseTool, ControlRequest
from betcode.sessions.fanout import Frame
from betcode.sessions.session import Session
from betcode.storage import pending as pending_rows
from betcode.storage.audit import AuditEvent, AuditRecorder
from betcode.storage.pending import PendingPermission
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter

log = logging.getLogger(__name__)


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
        self._audit = audit if audit is not None else AuditRecorder(writer, clock=clock)
        self._live = LiveRequests()
        # By session id: what a re-attached claude waits on that nobody is to answer yet.
        self._left_unanswered: dict[str, LeftUnanswered] = {}
        # One lock per session whose requests are being answered (weak: gone once unused).
        self._answering: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._notifier = (
            notifier if notifier is not None else Notifier(self.settings.notify_command)
        )
        self._automatic = AutomaticDecisions(
            writer,
            reader,
            rules,
            self.metrics,
            self._audit,
            self.settings,
            clock,
            forward=self._forward,
        )
        self._forwarding = Forwarding(writer, reader, self._live, self.settings, clock)
        self._withdrawals = Withdrawals(writer, self._live, clock, self._audit)
        # Told (with the session id) of each request once it is stored and shown: Web Push
        # wakes on it instead of waiting for its next look.
        self.forwarded_listeners: list[Callable[[str], None]] = []
        # A session at a cost cap asks here before its next turn (cost_requests).
        self.costs = CostRequests(writer, self.metrics, self.settings, clock, self._audit)
        self._answers = Answers(
            writer,
            reader,
            self._live,
            self.metrics,
            self.settings,
            clock,
            self._audit,
            is_subagent=lambda session_id: self._asker_label(session_id) is not None,
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
        # The process that asked (the one running now): an automatic answer goes to it only.
        asker = session.supervisor.pid
        tool = request.request
        if not isinstance(tool, CanUseTool):
            # BetCode registers no hooks or SDK MCP servers: say so, never leave claude waiting.
            await session.write_control(
                stdin.control_error(
                    request.request_id, "not supported by BetCode", request.dialect
                ),
                asker,
            )
            return
        if tool.tool_name == ASK_USER_QUESTION or not await self._automatic.decide(
            session, request, tool, asker, self.delegates
        ):
            await self._forward(session, request, tool)

    async def _forward(self, session: Session, request: ControlRequest, tool: CanUseTool) -> None:
        await self._forwarding.forward(session, request, tool, self._asker_label(session.id))
        for listener in self.forwarded_listeners:
            listener(session.id)

    async def ask_about_cost(
        self,
        session: Session,
        text: str,
        reached: CapReached,
        queued_id: int | None = None,
        *,
        idempotency_key: str = "",
    ) -> str:
        """A message held at a cost cap waits here, as a request of its own kind (its id);
        one that was queued (`queued_id`) leaves the queue as the request is stored."""
        request_id = await self.costs.ask(
            session, text, reached, queued_id, idempotency_key=idempotency_key
        )
        for listener in self.forwarded_listeners:
            listener(session.id)
        return request_id

    def _asker_label(self, session_id: str) -> str | None:
        """Which subagent asks, for a live subagent run's session; None for any other."""
        return None if self.delegates is None else self.delegates.asker_label(session_id)

    async def on_cancel(self, session: Session, request_id: str) -> None:
        self._automatic.withdraw_queued(request_id)
        await self._withdrawals.on_cancel(session, request_id)

    async def on_session_activity(self, session: Session) -> None:
        """Client activity (a user message, an attach, an answer) pushes back the expiry of the
        session's pending requests by one TTL."""
        self._live.remember(session)
        if self.settings.extend_on_activity:
            now, ttl = self._clock(), self.settings.ttl_seconds
            await self._writer.call(lambda c: pending_rows.extend_ttl(c, session.id, now, ttl))

    async def reattached(
        self, session: Session, claude_started_at: float, through_sequence: int
    ) -> None:
        """After a daemon restart: the requests the session's still-running claude made wait
        on it again (`forwarding`); those the last daemon committed, up to line
        `through_sequence`, but left with no answer on its way and not stored (`unanswered`)
        are kept to be decided again (`decide_again`) once whoever decides them is there."""
        await self._forwarding.reattached(session, claude_started_at)
        control_lines, stored = await self._reader.read(
            lambda c: (
                pending_rows.control_lines_since(
                    c, session.id, claude_started_at, through_sequence
                ),
                pending_rows.request_ids_since(c, session.id, claude_started_at),
            )
        )
        requests = unanswered_requests(control_lines, stored)
        if requests:
            self._left_unanswered[session.id] = LeftUnanswered(
                session, session.supervisor.pid, requests
            )

    async def decide_left_unanswered(self) -> None:
        """Startup, once the delegates are set and before serving: the requests `reattached`
        kept are decided again, except those of a subagent whose run is resumed later (an
        orchestration's step): its run brings the delegation and the label its requests go
        through, and decides them then (`decide_again`)."""
        for left in list(self._left_unanswered.values()):
            session_id = left.session.id
            if self.delegates is not None and await self.delegates.resumed_later(session_id):
                log.info("session %s: its unanswered requests wait for its run", session_id)
                continue
            await self.decide_again(left.session)

    async def decide_again(self, session: Session) -> None:
        """The requests `reattached` kept for the session, decided as if just read, under the
        same request ids: the holder takes one answer per request id, so claude never gets
        two. None once the claude that asked is gone (nothing waits for an answer)."""
        left = self._left_unanswered.pop(session.id, None)
        if left is None:
            return
        if not session.supervisor.runs(left.asker):
            log.info(
                "session %s: the claude that left %d request(s) unanswered is gone",
                session.id,
                len(left.requests),
            )
            return
        for request in left.requests:
            log.info(
                "session %s: %s left unanswered; deciding it again", session.id, request.request_id
            )
            await self.on_control_request(session, request)

    async def withdraw_all(
        self,
        session: Session,
        message: str,
        audit_of: Callable[[PendingPermission], AuditEvent],
    ) -> list[Frame]:
        """The session's claude is stopped for good (a subagent whose run ended): its
        unanswered requests are settled `cancelled`, never answered (`withdrawals`)."""
        return await self._withdrawals.withdraw_all(session, message, audit_of)

    async def drain_answers(self, session_id: str) -> None:
        """Returns once no answer to the session's requests is being applied. With the
        delegates already saying its questions are withdrawn, none is applied after it."""
        async with self._answer_lock(session_id):
            pass

    def has_pending(self, session_id: str) -> bool:
        return self._live.has_pending(session_id)

    async def replay_frames(self, session: Session, last_seq: int) -> list[Frame]:
        """Every still-pending request, flagged is_replay, for a client that just caught up
        (its subagents' too: one inbox)."""
        await self.on_session_activity(session)
        asking = [session.id]
        if self.delegates is not None:
            asking += await self.delegates.child_session_ids(session.id)
        return await self._forwarding.replay_frames(asking, last_seq)

    # ---- from clients ----

    async def answer(self, session: Session, answer: ClientAnswer) -> AnswerOutcome:
        """Apply a client's answer (`answers`): first answer wins; the answer reaches claude
        even if the process that asked is gone (see `orphans`)."""
        self._live.remember(session)
        with log_fields(request_id=answer.request_id):
            asking = await self._asking_session(session, answer)
            async with self._answer_lock(asking.id):
                await self._refuse_if_withdrawn(asking, answer.request_id)
                row = await self.find_request(answer.request_id)
                if row is not None and row.session_id == asking.id and is_cost_request(row):
                    return await self.costs.answer(asking, row, answer)
                return await self._answers.apply(asking, answer)

    def _answer_lock(self, session_id: str) -> asyncio.Lock:
        lock = self._answering.get(session_id)
        if lock is None:
            lock = self._answering[session_id] = asyncio.Lock()
        return lock

    async def _refuse_if_withdrawn(self, asking: Session, request_id: str) -> None:
        """PERMISSION_WITHDRAWN for a request of a subagent whose run ended or is ending,
        unless it was answered before (a repeat of that answer stays a duplicate)."""
        if self.delegates is None:
            return
        why = await self.delegates.withdrawn(asking.id)
        if why is None:
            return
        row = await self.find_request(request_id)
        if row is None or row.session_id != asking.id:
            return  # not found: the answer says so
        if row.response_received and row.response_decision != CANCELLED:
            return
        raise AnswerError(
            "PERMISSION_WITHDRAWN", f"permission request {request_id!r} was withdrawn: {why}"
        )

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
        """Unanswered requests of every session (None), or of one session and its running
        subagents (one inbox: its clients answer them; each row names its own session), in
        the order they were received."""
        if session_id is None:
            return await self._reader.read(pending_rows.list_unanswered)
        asking = [session_id]
        if self.delegates is not None:
            asking += await self.delegates.child_session_ids(session_id)

        def read(conn: sqlite3.Connection) -> list[PendingPermission]:
            rows = [row for one in asking for row in pending_rows.list_unanswered(conn, one)]
            return sorted(rows, key=lambda row: row.received_at)

        return await self._reader.read(read)

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
        self._automatic.apply_settings(settings)
        self._forwarding.apply_settings(settings)
        self._answers.apply_settings(settings)
        self.costs.apply_settings(settings)
        self._sweeper.apply_settings(settings)

    async def run_sweeper(self, interval: float | None = None) -> None:
        """Reminders and expiry, every `interval` seconds (default: the configured interval,
        which a reload may change); runs until cancelled."""
        await self._sweeper.run(interval)

    async def sweep_once(self) -> SweepReport:
        return await self._sweeper.sweep_once()

    async def close(self) -> None:
        """Withdraw the calls still queued; wait for notify commands still running."""
        await self._automatic.close()
        await self._notifier.close()
