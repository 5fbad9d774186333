"""Taking a running subagent back in hand: RevokeAutoApprove (SAG-15) and CancelSubagent
(SAG-16), each audited with what the subagent had done.

A cancelled subagent's questions still waiting in the parent's inbox are withdrawn as at the
end of any run (inbox.ParentInbox), each audited as denied by whoever cancelled it.

A worktree the daemon makes for a subagent (an orchestration step's own) is named in its row's
options; a cancel with `cleanup_worktree` removes that one only, through the WorktreeManager's
safe removal: refused, and kept, while removing it would lose work (SAG-16 asks for
`git checkout . && git clean -fd`, which would throw that work away).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from betcode.storage import subagents as rows
from betcode.storage.audit import AuditRecorder
from betcode.storage.reader import StoreReader
from betcode.subagents.audit import subagent_audit
from betcode.subagents.manager import SubagentManager
from betcode.v1 import agent_pb2
from betcode.worktrees import WorkAtRisk, WorktreeError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorktreeCleanup:
    """What a cancel's cleanup_worktree did with the subagent's own worktree."""

    removed: bool
    kept_reason: str = ""  # why not: what removing it would lose, or that there is none


@dataclass(frozen=True, slots=True)
class Cancelled:
    tool_calls: int  # calls its claude ran
    auto_approved: int  # of which the daemon approved automatically
    worktree: WorktreeCleanup | None = None  # asked for with cleanup_worktree


@dataclass(frozen=True, slots=True)
class Revoked:
    revoked: bool
    pending_tool_calls: int
    status: str


class SubagentControl:
    """Cancel and revoke on the manager's live runs."""

    def __init__(self, manager: SubagentManager, reader: StoreReader, audit: AuditRecorder) -> None:
        self._manager = manager
        self._reader = reader
        self._audit = audit

    async def cancel(
        self,
        subagent_id: str,
        reason: str,
        client_id: str | None,
        *,
        force: bool = False,
        cleanup_worktree: bool = False,
    ) -> Cancelled | None:
        """SAG-16: auto-approve off, claude stopped (SIGTERM and the grace period, or SIGKILL
        at once with `force`), `cancelled` recorded, its unanswered questions withdrawn, its
        own worktree removed if asked and safe, audited with the call counters; None when it
        had already finished, or was ending on its own (and then its worktree stays, with the
        work it finished)."""
        row = await self._manager.get(subagent_id)
        run = self._manager.runs.get(subagent_id)
        if run is None:
            return None
        run.delegation.revoke(reason or "cancelled")
        if force:
            policy = run.session.supervisor.policy
            run.session.supervisor.policy = dataclasses.replace(policy, kill_grace_seconds=0.0)
        await run.cancel(reason, client_id)
        if (await run.wait()).status != "cancelled":
            return None
        cancelled = Cancelled(
            await self._tool_calls(row.session_id),
            run.delegation.auto_approved,
            await self._remove_own_worktree(row) if cleanup_worktree else None,
        )
        context = {
            "reason": reason,
            "force": str(force),
            "tool_calls_executed": str(cancelled.tool_calls),
            "tool_calls_auto_approved": str(cancelled.auto_approved),
            "permission_requests_withdrawn": str(run.questions_withdrawn),
        }
        if cancelled.worktree is not None:
            context["worktree_removed"] = str(cancelled.worktree.removed)
            context["worktree_kept_reason"] = cancelled.worktree.kept_reason
        self._audit.record(
            subagent_audit("subagent_cancel", row, "success", actor=client_id, context=context)
        )
        return cancelled

    async def _remove_own_worktree(self, row: rows.SubagentRow) -> WorktreeCleanup:
        worktree_id = row.options.get("worktree_id")
        worktrees = self._manager.admission.worktrees
        if not isinstance(worktree_id, str) or worktrees is None:
            return WorktreeCleanup(False, "the daemon made no worktree for this subagent")
        try:
            await worktrees.remove(worktree_id)
        except WorktreeError as refused:  # WorkAtRisk above all; or removed by hand already
            level = logging.WARNING if isinstance(refused, WorkAtRisk) else logging.INFO
            log.log(level, "subagent %s: its worktree was kept: %s", row.id, refused.message)
            return WorktreeCleanup(False, refused.message)
        log.info("subagent %s: its worktree %s was removed", row.id, worktree_id)
        return WorktreeCleanup(True)

    async def _tool_calls(self, session_id: str) -> int:
        """Tool calls the subagent's claude ran (their results are in its event log)."""
        count, after = 0, 0
        while page := await self._reader.read_events(session_id, after, 1000):
            after = page[-1][0]
            for _, payload in page:
                if agent_pb2.AgentEvent.FromString(payload).HasField("tool_call_result"):
                    count += 1
        return count

    async def revoke(
        self, subagent_id: str, reason: str, terminate_if_pending: bool, client_id: str | None
    ) -> Revoked:
        """SAG-15: auto-approve off without killing. A call already approved and running
        finishes (or, with `terminate_if_pending`, the subagent is ended); the next call asks."""
        row = await self._manager.get(subagent_id)
        run = self._manager.runs.get(subagent_id)
        if run is None or not run.delegation.auto_approving:
            return Revoked(False, 0, row.status if run is None else run.status)
        run.delegation.revoke(reason)
        in_flight = [
            tool_id
            for tool_id in run.delegation.approved_ids
            if run.session.translator.tool_unfinished(tool_id)
        ]
        if in_flight and terminate_if_pending:
            run.terminate(f"auto-approve revoked with a call in flight: {reason}")
        self._audit.record(
            subagent_audit(
                "permission_revoke",
                row,
                "success",
                actor=client_id,
                context={
                    "reason": reason,
                    "pending_tool_calls": str(len(in_flight)),
                    "terminate_if_pending": str(terminate_if_pending),
                },
            )
        )
        return Revoked(True, len(in_flight), run.status)
