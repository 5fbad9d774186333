"""What a spawn must pass before anything starts (a refused one leaves no row, session or
process): sound delegation (limits.check_delegation, allowed_tools as rules), the parent's
quota (`max_per_session` unfinished, `spawns_per_hour`), a registered repository for a step's
own worktree, and the directory's advisory lock (locks.py).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from betcode.config.settings import SubagentSettings
from betcode.storage import subagents as rows
from betcode.storage import worktrees as worktree_rows
from betcode.storage.reader import StoreReader
from betcode.subagents.delegation import invalid_tools
from betcode.subagents.limits import AutoApproveLimits, DelegationError, check_delegation
from betcode.subagents.locks import LockMode, WorktreeLocks
from betcode.subagents.plan import StepSpec
from betcode.worktrees import WorktreeManager

HOUR = 3600.0
MAX_TURNS = 200


class SubagentRefused(Exception):
    """A request refused as asked; `code` is an application error code (docs/GRPC.md#error-codes)
    (SUBAGENT_LIMIT, RATE_LIMITED, FAILED_PRECONDITION...)."""

    def __init__(self, code: str, message: str, retry_after_seconds: float = 0.0) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    parent_session_id: str
    prompt: str
    model: str = ""
    working_directory: str = ""
    allowed_tools: tuple[str, ...] = ()
    max_turns: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    name: str = ""
    auto_approve: bool = False
    limits: AutoApproveLimits = field(default_factory=AutoApproveLimits)
    inherit_grants: bool = False
    worktree: bool = False
    orchestration_id: str | None = None
    step_id: str | None = None
    client_id: str | None = None
    lock: LockMode = LockMode.NONE
    wait_for_lock: bool = False


class Admission:
    def __init__(self, reader: StoreReader, settings: SubagentSettings) -> None:
        self._reader = reader
        self.settings = settings
        self.locks = WorktreeLocks()
        # Steps asking for a worktree of their own get one from here (None: refused).
        self.worktrees: WorktreeManager | None = None

    def check(self, request: SpawnRequest) -> None:
        _check(
            request.prompt,
            request.max_turns,
            request.auto_approve,
            request.allowed_tools,
            request.env,
        )

    async def check_step(self, step: StepSpec, parent_directory: str) -> None:
        """An orchestration step's checks, all made before the plan starts."""
        _check(step.prompt, step.max_turns, step.auto_approve, step.allowed_tools, step.env)
        if step.worktree:
            await self.repository_of(step.working_directory or parent_directory)

    def lock(
        self, cwd: str, subagent_id: str, request: SpawnRequest
    ) -> Callable[[], Awaitable[None]] | None:
        """Takes the directory's advisory lock now, or returns the wait for it (SAG-18)."""
        if self.locks.try_acquire(cwd, subagent_id, request.lock):
            return None
        if request.wait_for_lock:
            return lambda: self.locks.acquire(cwd, subagent_id, request.lock)
        self.locks.release(subagent_id)
        holders = ", ".join(
            f"{owner} ({mode.name.lower()})" for owner, mode in self.locks.holders(cwd).items()
        )
        raise SubagentRefused(
            "WORKTREE_IN_USE",
            f"{cwd} is locked by {holders}; ask with wait_for_lock to wait for it",
        )

    async def repository_of(self, directory: str) -> worktree_rows.RepoRecord:
        """The registered repository holding `directory`, for a step's own worktree."""
        if self.worktrees is None:
            raise SubagentRefused(
                "FAILED_PRECONDITION", "this daemon has no worktree service for a step's worktree"
            )
        repos, _ = await self._reader.read(worktree_rows.list_repos)
        # Both are absolute and resolved already (sessions and repositories store them so).
        where = PurePath(directory)
        holding = [r for r in repos if where.is_relative_to(r.repo_path)]
        if not holding:
            raise SubagentRefused(
                "FAILED_PRECONDITION",
                f"{directory} is in no registered repository, so a step cannot get a worktree "
                "of its own there; register it first: betcode repo register PATH",
            )
        return max(holding, key=lambda r: len(r.repo_path))

    async def own_worktree(self, cwd: str, request: SpawnRequest) -> tuple[str, str]:
        """A new worktree (and branch) for the step, so parallel steps never share a
        checkout; it stays after the step, with its work, for the user to merge."""
        repo = await self.repository_of(cwd)
        assert self.worktrees is not None  # checked by _repository_of
        label = re.sub(r"[^A-Za-z0-9._-]+", "-", request.step_id or request.name or "subagent")
        name = f"{label.strip('.-_') or 'step'}-{uuid.uuid4().hex[:8]}"
        view = await self.worktrees.create(name=name, repo_id=repo.id)
        return view.record.id, view.record.path

    async def check_parent_quota(self, parent_session_id: str) -> None:
        now = time.time()
        # Orchestration steps are bounded by their plan (at most 50 steps), not these.
        spawned, recent = await self._reader.read(
            lambda c: (
                sum(
                    1
                    for row in rows.list_subagents(c, parent_session_id)
                    if row.orchestration_id is None and row.status in rows.UNFINISHED
                ),
                rows.spawned_since(c, parent_session_id, now - HOUR),
            )
        )
        if spawned >= self.settings.max_per_session:
            raise SubagentRefused(
                "SUBAGENT_LIMIT",
                f"session {parent_session_id} already has {spawned} subagents running or waiting "
                f"(daemon.subagent.max_per_session={self.settings.max_per_session})",
            )
        if recent >= self.settings.spawns_per_hour:
            raise SubagentRefused(
                "RATE_LIMITED",
                f"session {parent_session_id} spawned {recent} subagents in the last hour "
                f"(daemon.subagent.spawns_per_hour={self.settings.spawns_per_hour})",
                retry_after_seconds=60.0,
            )


def _check(
    prompt: str,
    max_turns: int,
    auto_approve: bool,
    allowed_tools: Sequence[str],
    env: Mapping[str, str],
) -> None:
    if not prompt.strip():
        raise DelegationError("INVALID_ARGUMENT", "prompt is required")
    if not 0 <= max_turns <= MAX_TURNS:
        raise DelegationError("INVALID_ARGUMENT", f"max_turns must be 0 (default) to {MAX_TURNS}")
    check_delegation(auto_approve, allowed_tools, env)
    problems = invalid_tools(allowed_tools)
    if problems:
        raise DelegationError("INVALID_ARGUMENT", "allowed_tools: " + "; ".join(problems))
