"""SubagentManager: the daemon's live subagents — spawn, resume, find, send to (SAG-02..07).

Every check runs before anything starts (a refused spawn leaves no row, no session, no
process): the parent session exists, the request passes admission.py, the pool has room. Then
the subagent's session is created like any other (sessions.manager) with the subagent's claude
flags, its row stored, and its run started (runner.py), its questions relayed to the parent
(inbox.py) until it ends, when those nobody answered are withdrawn. Cancel and revoke are
control.py's; watching is watch.py's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

from betcode.claude.command import CommandOptions
from betcode.config.settings import SubagentSettings
from betcode.permissions.bridge import PermissionBridge
from betcode.sessions.manager import SessionManager, validate_working_directory
from betcode.sessions.session import Session
from betcode.storage import grants as grant_rows
from betcode.storage import subagents as rows
from betcode.storage.audit import AuditRecorder
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.subagents.admission import Admission, SpawnRequest
from betcode.subagents.audit import subagent_audit
from betcode.subagents.delegation import Delegation
from betcode.subagents.inbox import ParentInbox
from betcode.subagents.limits import (
    AutoApproveLimits,
    tool_names,
)
from betcode.subagents.locks import LockMode
from betcode.subagents.pool import SubagentPool
from betcode.subagents.runner import SubagentRun

log = logging.getLogger(__name__)

FROM_NOW_ON = 1 << 62  # an attach after this sequence sees only what comes next


class SubagentNotFound(LookupError):
    def __init__(self, subagent_id: str) -> None:
        super().__init__(f"no subagent with id {subagent_id!r}")


class SubagentManager:
    def __init__(
        self,
        sessions: SessionManager,
        writer: StoreWriter,
        reader: StoreReader,
        settings: SubagentSettings,
        audit: AuditRecorder,
        bridge: PermissionBridge,
    ) -> None:
        self.sessions = sessions
        self._writer = writer
        self._reader = reader
        self.settings = settings
        self.pool = SubagentPool(settings)
        self._audit = audit
        self.runs: dict[str, SubagentRun] = {}
        self.by_session: dict[str, SubagentRun] = {}  # the inbox finds the asker by session
        self._bridge = bridge
        self._inbox = ParentInbox(sessions, bridge)
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
        self._audit.record(
            subagent_audit("subagent_spawn", row, "success", actor=request.client_id)
        )
        return self._start(row, session, gate=gate)

    async def abandon_all(self) -> None:
        """Daemon stop (orchestrator.Orchestrations.shutdown): every run stops unrecorded."""
        runs = list(self.runs.values())
        await asyncio.gather(*(run.abandon() for run in runs), return_exceptions=True)
        await self._inbox.stop_relays()

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
            self._inbox,
            timeout_seconds=self.settings.timeout_seconds,
            resume=resume,
            gate=gate,
            on_finished=self._finished,
        )
        self.runs[row.id] = run
        self.by_session[session.id] = run
        # A resumed subagent's earlier questions are in the parent's log already.
        self._inbox.relay(run, FROM_NOW_ON if resume else 0)
        return run

    async def resume(self, row: rows.SubagentRow) -> SubagentRun:
        """A subagent of an orchestration the daemon was restarted in: its session goes on,
        and the requests its re-attached claude was left waiting on are decided now that its
        run (its delegation, its label) is there."""
        session = await self.sessions.get(row.session_id)
        self.admission.locks.try_acquire(row.working_directory, row.id, LockMode.NONE)
        run = self._start(row, session, resume=True)
        await self._bridge.decide_again(session)
        return run

    def _finished(self, run: SubagentRun) -> None:
        outcome = run.finished.result()
        # A cancel is audited by control.py, with who asked and the call counters.
        if outcome.status != "cancelled":
            completed = outcome.status == "completed"
            self._audit.record(
                subagent_audit(
                    "subagent_complete" if completed else "subagent_fail",
                    run.row,
                    "success" if completed else "failure",
                    error=outcome.error,
                )
            )
        self.runs.pop(run.id, None)
        self.by_session.pop(run.session.id, None)
        self.admission.locks.release(run.id)

    async def end_runs_left_behind(self) -> None:
        """Startup, before serving: the runs the last daemon left without their end —
        reconciliation failed them, while their questions still wait or their claude still
        runs under its holder — end as a live run does (`ParentInbox.end_left_behind`).
        A failure is logged; the others end all the same."""
        # Loaded this early, a session is one re-attached to its claude under its holder.
        running = [session.id for session in self.sessions.live]
        ended = await self._reader.read(lambda c: rows.ended_unsettled(c, running))
        for row in ended:
            try:
                withdrawn = await self._inbox.end_left_behind(row)
            except Exception:
                log.exception("subagent %s: ending what its run left behind failed", row.id)
            else:
                log.info("subagent %s %s: %d question(s) withdrawn", row.id, row.status, withdrawn)

    # ---- lookups ----

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

    # ---- input ----

    async def send(self, subagent_id: str, text: str) -> bool:
        """Not delivered once the run is ending: it would start its stopped claude again."""
        run = self.runs.get(subagent_id)
        if run is None or run.status != "running" or run.ending is not None:
            await self.get(subagent_id)  # NOT_FOUND for an unknown id
            return False
        await run.send(text)
        return True


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
