"""SubagentManager: spawn, list, send to, cancel, revoke and watch subagents (SAG-02..07, 15, 16).

Every check runs before anything starts (a refused spawn leaves no row, no session, no
process): the parent session exists, the request passes admission.py, the pool has room. Then
the subagent's session is created like any other (sessions.manager) with the subagent's claude
flags, its row stored, and its run started (runner.py).

A worktree the daemon makes for a subagent (an orchestration step's own) is named in its row's
options; a cancel with `cleanup_worktree` removes that one only, through the WorktreeManager's
safe removal: refused, and kept, while removing it would lose work (SAG-16 asks for
`git checkout . && git clean -fd`, which would throw that work away).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from betcode.claude.command import CommandOptions
from betcode.config.settings import SubagentSettings
from betcode.sessions.manager import SessionManager, validate_working_directory
from betcode.sessions.session import Session
from betcode.storage import grants as grant_rows
from betcode.storage import subagents as rows
from betcode.storage.audit import AuditEvent, AuditRecorder, EventType
from betcode.storage.audit import Outcome as AuditOutcome
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.subagents.admission import Admission, SpawnRequest
from betcode.subagents.delegation import Delegation
from betcode.subagents.inbox import relay_questions
from betcode.subagents.limits import (
    AutoApproveLimits,
    tool_names,
)
from betcode.subagents.locks import LockMode
from betcode.subagents.pool import SubagentPool
from betcode.subagents.runner import SubagentRun
from betcode.v1 import agent_pb2
from betcode.worktrees import WorkAtRisk, WorktreeError

log = logging.getLogger(__name__)

FROM_NOW_ON = 1 << 62  # an attach after this sequence sees only what comes next
DAEMON_ACTOR = "subagent-manager"


class SubagentNotFound(LookupError):
    def __init__(self, subagent_id: str) -> None:
        super().__init__(f"no subagent with id {subagent_id!r}")


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


class SubagentManager:
    def __init__(
        self,
        sessions: SessionManager,
        writer: StoreWriter,
        reader: StoreReader,
        settings: SubagentSettings,
        audit: AuditRecorder,
    ) -> None:
        self.sessions = sessions
        self._writer = writer
        self._reader = reader
        self.settings = settings
        self.pool = SubagentPool(settings)
        self._audit = audit
        self.runs: dict[str, SubagentRun] = {}
        self.by_session: dict[str, SubagentRun] = {}  # the inbox finds the asker by session
        self._relays: dict[str, asyncio.Task[None]] = {}
        self.admission = Admission(reader, settings)

    def apply_settings(self, settings: SubagentSettings) -> None:
        self.settings = settings
        self.admission.settings = settings
        self.pool.apply_settings(settings)

    # ---- spawning ----

    async def spawn(self, request: SpawnRequest) -> SubagentRun:
        parent = await self.sessions.get(request.parent_session_id)
        self.admission.check(request)
        if request.orchestration_id is None:
            await self.admission.check_parent_quota(request.parent_session_id)
        self.pool.check_room()
        cwd = request.working_directory or parent.record.working_directory
        name = request.name or f"subagent-{uuid.uuid4().hex[:8]}"
        worktree_id = None
        if request.worktree:
            worktree_id, cwd = await self.admission.own_worktree(cwd, request)
        cwd = validate_working_directory(cwd)
        subagent_id = f"sa-{uuid.uuid4()}"
        gate = self.admission.lock(cwd, subagent_id, request)
        try:
            session = await self.sessions.create(
                working_directory=cwd,
                model=request.model,
                worktree_id=worktree_id,
                name=f"subagent {name}",
                client_id=request.client_id,
            )
        except BaseException:
            self.admission.locks.release(subagent_id)
            raise
        max_turns = request.max_turns or self.settings.default_max_turns
        row = rows.SubagentRow(
            id=subagent_id,
            parent_session_id=parent.id,
            session_id=session.id,
            name=name,
            status="pending",
            prompt=request.prompt,
            model=request.model,
            working_directory=session.record.working_directory,
            allowed_tools=list(request.allowed_tools),
            auto_approve=request.auto_approve,
            max_turns=max_turns,
            result_summary=None,
            exit_code=None,
            created_at=time.time(),
            started_at=None,
            completed_at=None,
            orchestration_id=request.orchestration_id,
            step_id=request.step_id,
            options=_options(request, worktree_id),
            error_message=None,
        )

        def store(conn: object) -> None:
            rows.insert_subagent(conn, row)  # type: ignore[arg-type]
            if request.inherit_grants:
                grant_rows.copy_grants(conn, parent.id, session.id)  # type: ignore[arg-type]

        await self._writer.call(store)
        self._audit_event("subagent_spawn", row, "success", actor=request.client_id)
        return self._start(row, session, gate=gate)

    async def abandon_all(self) -> None:
        """Daemon stop (orchestrator.Orchestrations.shutdown): every run stops unrecorded."""
        runs = list(self.runs.values())
        await asyncio.gather(*(run.abandon() for run in runs), return_exceptions=True)
        relays = list(self._relays.values())
        for relay in relays:
            relay.cancel()
        await asyncio.gather(*relays, return_exceptions=True)

    def _start(
        self,
        row: rows.SubagentRow,
        session: Session,
        resume: bool = False,
        gate: Callable[[], Awaitable[None]] | None = None,
    ) -> SubagentRun:
        _configure(session, row)
        limits = AutoApproveLimits(**row.options.get("limits", {}))
        label = row.name if row.step_id is None else f"{row.name} (step {row.step_id})"
        delegation = Delegation(
            row.id,
            row.parent_session_id,
            label,
            tuple(row.allowed_tools),
            row.auto_approve,
            limits,
            started_at=row.created_at,
        )
        run = SubagentRun(
            row,
            session,
            self._writer,
            self.pool,
            delegation,
            timeout_seconds=self.settings.timeout_seconds,
            resume=resume,
            gate=gate,
            on_finished=self._finished,
        )
        self.runs[row.id] = run
        self.by_session[session.id] = run
        # A resumed subagent's earlier questions are in the parent's log already.
        after = FROM_NOW_ON if resume else 0
        self._relays[row.id] = asyncio.create_task(self._relay(run, after), name=f"inbox-{row.id}")
        return run

    async def _relay(self, run: SubagentRun, after_seq: int) -> None:
        try:
            parent = await self.sessions.get(run.row.parent_session_id)
            await relay_questions(run.session, parent, after_seq)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("subagent %s: its questions no longer reach the parent", run.id)

    async def resume(self, row: rows.SubagentRow) -> SubagentRun:
        """A subagent of an orchestration the daemon was restarted in: its session goes on."""
        session = await self.sessions.get(row.session_id)
        self.admission.locks.try_acquire(row.working_directory, row.id, LockMode.NONE)
        return self._start(row, session, resume=True)

    def _finished(self, run: SubagentRun) -> None:
        outcome = run.finished.result()
        # A cancel is audited by `cancel`, with who asked and the call counters.
        if outcome.status != "cancelled":
            completed = outcome.status == "completed"
            self._audit_event(
                "subagent_complete" if completed else "subagent_fail",
                run.row,
                "success" if completed else "failure",
                error=outcome.error,
            )
        self.runs.pop(run.id, None)
        self.by_session.pop(run.session.id, None)
        self.admission.locks.release(run.id)
        relay = self._relays.pop(run.id, None)
        if relay is not None:
            relay.cancel()

    def _audit_event(
        self,
        event_type: EventType,
        row: rows.SubagentRow,
        outcome: AuditOutcome,
        *,
        actor: str | None = None,
        error: str = "",
        context: Mapping[str, str] | None = None,
    ) -> None:
        self._audit.record(
            AuditEvent(
                event_type=event_type,
                actor_type="user" if actor else "daemon",
                actor_id=actor or DAEMON_ACTOR,
                outcome=outcome,
                session_id=row.session_id,
                subagent_id=row.id,
                parent_session_id=row.parent_session_id,
                error_message=error or None,
                context=dict(context or {}),
            )
        )

    # ---- lookups ----

    def run_of_session(self, session_id: str) -> SubagentRun | None:
        return self.by_session.get(session_id)

    async def get(self, subagent_id: str) -> rows.SubagentRow:
        row = await self._reader.read(lambda c: rows.get_subagent(c, subagent_id))
        if row is None:
            raise SubagentNotFound(subagent_id)
        return row

    async def list_rows(
        self, parent_session_id: str = "", status: str = ""
    ) -> list[rows.SubagentRow]:
        return await self._reader.read(
            lambda c: rows.list_subagents(c, parent_session_id or None, status or None)
        )

    # ---- control ----

    async def send(self, subagent_id: str, text: str) -> bool:
        run = self.runs.get(subagent_id)
        if run is None or run.status != "running":
            await self.get(subagent_id)  # NOT_FOUND for an unknown id
            return False
        await run.send(text)
        return True

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
        at once with `force`), `cancelled` recorded, its own worktree removed if asked and
        safe, audited with the call counters; None when it had already finished (and then
        its worktree stays, with the work it finished)."""
        row = await self.get(subagent_id)
        run = self.runs.get(subagent_id)
        if run is None:
            return None
        run.delegation.revoke(reason or "cancelled")
        if force:
            policy = run.session.supervisor.policy
            run.session.supervisor.policy = dataclasses.replace(policy, kill_grace_seconds=0.0)
        await run.cancel(reason)
        await run.wait()
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
        }
        if cancelled.worktree is not None:
            context["worktree_removed"] = str(cancelled.worktree.removed)
            context["worktree_kept_reason"] = cancelled.worktree.kept_reason
        self._audit_event("subagent_cancel", row, "success", actor=client_id, context=context)
        return cancelled

    async def _remove_own_worktree(self, row: rows.SubagentRow) -> WorktreeCleanup:
        worktree_id = row.options.get("worktree_id")
        worktrees = self.admission.worktrees
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
        row = await self.get(subagent_id)
        run = self.runs.get(subagent_id)
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
        self._audit_event(
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
        return Revoked(True, len(in_flight), run.status)

    async def watch_frames(
        self, subagent_id: str, after_seq: int, watcher_id: str
    ) -> AsyncIterator[tuple[rows.SubagentRow, list[tuple[int, bytes]]]]:
        """The subagent session's events after `after_seq` (replay, then live) until it has
        finished and everything it wrote was delivered; then one last empty batch with the
        settled row."""
        row = await self.get(subagent_id)
        run = self.runs.get(subagent_id)
        session = await self.sessions.get(row.session_id)
        last = after_seq
        if run is not None:
            stream = session.attach(
                watcher_id, after_seq, max_count=256, max_bytes=1 << 20, takes_input=False
            )
            try:
                while True:
                    batch_next: asyncio.Future[list[tuple[int, bytes]]] = asyncio.ensure_future(
                        anext(stream)
                    )
                    either: list[asyncio.Future[Any]] = [batch_next, run.finished]
                    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                    if not batch_next.done():
                        batch_next.cancel()
                        await asyncio.gather(batch_next, return_exceptions=True)
                        break
                    batch = batch_next.result()
                    if batch:
                        last = max(last, batch[-1][0])
                        yield row, batch
            finally:
                await stream.aclose()
        while True:  # whatever was committed until the end
            page = await self._reader.read_events(session.id, last, 500)
            if not page:
                break
            last = page[-1][0]
            yield row, page
        yield await self.get(subagent_id), []


def _options(request: SpawnRequest, worktree_id: str | None) -> dict[str, object]:
    options: dict[str, object] = {
        "env": dict(request.env),
        "limits": dataclasses.asdict(request.limits),
    }
    if worktree_id is not None:
        options["worktree_id"] = worktree_id  # made for this subagent: cleanup_worktree's
    return options


def _configure(session: Session, row: rows.SubagentRow) -> None:
    """The subagent's claude flags: model, max turns, and (tool restriction) only its tools.
    Auto-approval is the daemon's, call by call (delegation.py), never claude's
    --allowedTools, so every approved call is counted, limited and audited."""
    session.supervisor.command_options = CommandOptions(
        model=row.model or None,
        max_turns=row.max_turns,
        tools=tuple(tool_names(row.allowed_tools)),
    )
    env = row.options.get("env", {})
    session.supervisor.extra_env = dict(env) if isinstance(env, dict) else {}
