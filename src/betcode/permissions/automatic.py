"""The requests the bridge answers without asking anyone (bridge.py's steps 1, 2, 4 and 5).

A deny rule, a one-shot grant, allow rules (with session grants) or a subagent's delegation
decide; each such decision is counted, audited (`decisions.auto_audit`, or by the delegation
itself) and written to claude at once, with no client event. A call the delegation's rate
limit queues waits in a task of its own, off the session's line loop, and is answered (or
forwarded, `Forward`) when the limit lets it through.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from betcode.config.settings import PermissionSettings
from betcode.observability.logs import log_fields
from betcode.permissions import orphans
from betcode.permissions.decisions import auto_audit
from betcode.permissions.delegates import Delegated, Delegates, Queued
from betcode.permissions.engine import Behavior, evaluate
from betcode.permissions.grants import GrantAction, SessionGrant
from betcode.permissions.metrics import DecisionCounters, DecisionKind
from betcode.permissions.rulebook import RuleBook
from betcode.permissions.sweeper import Clock
from betcode.protocol import writer as stdin
from betcode.protocol.messages import CanUseTool, ControlRequest
from betcode.sessions.session import Session
from betcode.storage import grants as grant_rows
from betcode.storage import pending as pending_rows
from betcode.storage.audit import AuditRecorder
from betcode.storage.pending import PendingPermission
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter

log = logging.getLogger(__name__)

# Sends a request nobody decided to the clients (the bridge's forward).
Forward = Callable[[Session, ControlRequest, CanUseTool], Awaitable[None]]


class AutomaticDecisions:
    """Rules, grants, one-shot approvals and delegation for the bridge; shares its counters,
    audit and clock."""

    def __init__(
        self,
        writer: StoreWriter,
        reader: StoreReader,
        rules: RuleBook,
        metrics: DecisionCounters,
        audit: AuditRecorder,
        settings: PermissionSettings,
        clock: Clock,
        forward: Forward,
    ) -> None:
        self._writer = writer
        self._reader = reader
        self._rules = rules
        self._metrics = metrics
        self._audit = audit
        self._settings = settings
        self._clock = clock
        self._forward = forward
        self._queued: dict[str, asyncio.Task[None]] = {}  # by request id: see _delegated

    def apply_settings(self, settings: PermissionSettings) -> None:
        """A reload: one-shot grants from now on last the new TTL."""
        self._settings = settings

    async def decide(
        self,
        session: Session,
        request: ControlRequest,
        tool: CanUseTool,
        asker: int | None,
        delegates: Delegates | None,
    ) -> bool:
        """Answer at once if a rule, a grant or a one-shot approval decides; False to forward.
        The answer goes to claude process `asker` only (`Session.write_control`)."""
        ruleset = await self._rules.ruleset_for(session.record.working_directory)
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
            home=self._rules.home,
            grants=[SessionGrant(g.tool_name, g.pattern, GrantAction(g.action)) for g in grants],
        )
        rules = "; ".join(rule.describe() for rule in decision.rules)
        if decision.behavior is Behavior.DENY:
            line = stdin.permission_deny(
                request.request_id, decision.message, dialect=request.dialect
            )
            await self._auto(session, request, tool, asker, line, DecisionKind.AUTO_DENY, rules)
            return True
        if await self._use_one_shot(session, request, tool, asker, undelivered):
            return True
        if decision.behavior is Behavior.ALLOW:
            line = stdin.permission_allow(request.request_id, dialect=request.dialect)
            await self._auto(session, request, tool, asker, line, DecisionKind.AUTO_ALLOW, rules)
            return True
        if decision.behavior is Behavior.UNDECIDED and delegates is not None:
            return await self._delegated(session, request, tool, asker, delegates)
        return False

    async def _delegated(
        self,
        session: Session,
        request: ControlRequest,
        tool: CanUseTool,
        asker: int | None,
        delegates: Delegates,
    ) -> bool:
        delegated = await delegates.decide(session, request, tool)
        if delegated is None:
            return False
        if isinstance(delegated, Queued):
            # Waited for off the session's line loop: its other lines, and a stop, go on.
            waiting = asyncio.create_task(
                self._answer_when_let_through(session, request, tool, asker, delegated)
            )
            self._queued[request.request_id] = waiting
            waiting.add_done_callback(lambda _: self._queued.pop(request.request_id, None))
            return True
        await self._answer_delegated(session, request, tool, asker, delegated)
        return True

    async def _answer_when_let_through(
        self,
        session: Session,
        request: ControlRequest,
        tool: CanUseTool,
        asker: int | None,
        queued: Queued,
    ) -> None:
        with log_fields(request_id=request.request_id):
            try:
                delegated = await queued.decision
                if delegated is None:
                    await self._forward(session, request, tool)
                else:
                    await self._answer_delegated(session, request, tool, asker, delegated)
            except asyncio.CancelledError:
                log.info("session %s: queued %s withdrawn", session.id, request.request_id)
                raise
            except Exception:
                log.exception(
                    "session %s: the queued %s was not answered", session.id, request.request_id
                )

    async def _answer_delegated(
        self,
        session: Session,
        request: ControlRequest,
        tool: CanUseTool,
        asker: int | None,
        delegated: Delegated,
    ) -> None:
        kind = DecisionKind.AUTO_ALLOW if delegated.allow else DecisionKind.AUTO_DENY
        self._metrics.count(kind, tool.tool_name)
        line = (
            stdin.permission_allow(request.request_id, dialect=request.dialect)
            if delegated.allow
            else stdin.permission_deny(
                request.request_id, delegated.message, dialect=request.dialect
            )
        )
        await session.write_control(line, asker)

    async def _auto(
        self,
        session: Session,
        request: ControlRequest,
        tool: CanUseTool,
        asker: int | None,
        line: bytes,
        kind: DecisionKind,
        reason: str,
    ) -> None:
        self._metrics.count(kind, tool.tool_name)
        log.info("session %s: %s %s by %s", session.id, request.request_id, kind.value, reason)
        allowed = kind is DecisionKind.AUTO_ALLOW
        self._audit.record(auto_audit(session.id, request.request_id, tool, allowed, reason))
        await session.write_control(line, asker)

    async def _use_one_shot(
        self,
        session: Session,
        request: ControlRequest,
        tool: CanUseTool,
        asker: int | None,
        undelivered: Sequence[PendingPermission],
    ) -> bool:
        grant = orphans.one_shot_for(
            undelivered,
            tool.tool_name,
            tool.input,
            now=self._clock(),
            lifetime=self._settings.ttl_seconds,
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
        if not await session.write_control(line, asker):
            # The claude that asked is gone: the approval stays for the next one's call.
            await self._writer.call(lambda c: pending_rows.mark_undelivered(c, grant.request_id))
        return True

    def withdraw_queued(self, request_id: str) -> None:
        """claude withdrew a call its rate limit holds back: nothing is to answer it."""
        queued = self._queued.pop(request_id, None)
        if queued is not None:
            queued.cancel()

    async def close(self) -> None:
        """Withdraw the calls still queued."""
        queued = list(self._queued.values())
        for waiting in queued:
            waiting.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
