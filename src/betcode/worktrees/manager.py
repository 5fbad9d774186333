"""Worktrees of registered repositories: create, list, get, remove, rescue.

A failed create leaves nothing behind: no row, no directory, no branch it made, no
`.gitignore` line. A removal never loses work: it is refused, naming what would be lost
(safety.py), unless forced, and a forced one first saves that work under a rescue ref. Only a
branch the daemon created is ever deleted, and a directory git will not remove is reported,
never deleted by other means.

Other capabilities (subagent orchestration) create and remove worktrees through this class.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from betcode.config.settings import WorktreeSettings
from betcode.storage import worktrees as rows
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.worktrees import checkout, rescue, safety
from betcode.worktrees.errors import Refusal, WorkAtRisk, WorktreeError
from betcode.worktrees.git import git, git_ok
from betcode.worktrees.paths import check_branch_name, check_worktree_name, place_worktree
from betcode.worktrees.setup_hooks import SetupOutcome, run_setup, setup_commands

log = logging.getLogger(__name__)


class SessionActivity(Protocol):
    """What the sessions of a worktree are doing (implemented by the SessionManager)."""

    def busy_in_worktree(self, worktree_id: str) -> list[str]:
        """Why removing the worktree now would cut work short (e.g. a running turn)."""
        ...

    async def close_worktree_sessions(self, worktree_id: str) -> int:
        """Stop the worktree's live sessions (their history stays); how many were live."""
        ...

    async def move_all(
        self, from_directory: str, directory: str, worktree_id: str
    ) -> tuple[str, ...]:
        """Point every session of `from_directory` at `directory`, in worktree `worktree_id`."""
        ...


class NoSessions:
    def busy_in_worktree(self, worktree_id: str) -> list[str]:
        return []

    async def close_worktree_sessions(self, worktree_id: str) -> int:
        return 0

    async def move_all(
        self, from_directory: str, directory: str, worktree_id: str
    ) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class WorktreeView:
    """A worktree row with what is true on disk now."""

    record: rows.WorktreeRecord
    exists_on_disk: bool


@dataclass(frozen=True, slots=True)
class Removal:
    sessions_closed: int
    rescue: rows.RescueRecord | None = None
    at_risk: list[str] = field(default_factory=list)  # what was saved before a forced removal


class WorktreeManager:
    def __init__(
        self,
        writer: StoreWriter,
        reader: StoreReader,
        settings: WorktreeSettings,
        default_base_dir: Path,
        sessions: SessionActivity | None = None,
    ) -> None:
        self._writer = writer
        self._reader = reader
        self.settings = settings  # replaced by a reload: read at each create
        self._default_base_dir = default_base_dir
        self.sessions: SessionActivity = sessions or NoSessions()
        self._repo_locks: dict[str, asyncio.Lock] = {}
        self._seen_missing: set[str] = set()  # worktrees found missing (and pruned) this run

    def repo_lock(self, repo_path: str) -> asyncio.Lock:
        """Serialises the git operations on one repository."""
        return self._repo_locks.setdefault(repo_path, asyncio.Lock())

    # ---- create ----

    async def create(
        self,
        *,
        name: str,
        repo_id: str,
        branch: str = "",
        create_branch: bool | None = None,
        setup_script: str = "",
        start_point: str | None = None,
        run_setup_hooks: bool = True,
    ) -> WorktreeView:
        """A new worktree on `branch` (default: a new branch called `name`). `create_branch`
        True: the branch must be new; False: it must exist; None: made if missing."""
        check_worktree_name(name)
        if branch:
            check_branch_name(branch)
        else:
            branch, create_branch = name, True if create_branch is None else create_branch
        repo = await self._repo(repo_id)
        placement = place_worktree(repo, name, self._base_dir())
        async with self.repo_lock(repo.repo_path):
            if await self._reader.read(lambda c: rows.find_worktree_by_name(c, name, repo.id)):
                raise WorktreeError(
                    Refusal.EXISTS,
                    f"repository {repo.name!r} already has a worktree called {name!r}",
                    {"name": name},
                )
            plan = await checkout.plan(repo, placement, branch, create_branch, start_point)
            await checkout.check_space(plan, self.settings.min_free_bytes)
            made = await checkout.add(plan)
            try:
                setup = (
                    await self._run_setup(plan, repo, setup_script)
                    if run_setup_hooks
                    else SetupOutcome("none")
                )
                record = _new_record(name, repo, plan, setup_script, setup)
                await self._writer.call(lambda c: rows.insert_worktree(c, record))
            except BaseException:
                await checkout.undo(made)
                raise
        log.info("worktree %s created at %s on branch %s", name, plan.path, branch)
        return WorktreeView(record, True)

    def _base_dir(self) -> Path:
        """Where GLOBAL worktrees go (`daemon.worktree.base_dir`, else the default)."""
        return Path(self.settings.base_dir or self._default_base_dir)

    async def _run_setup(
        self, plan: checkout.Plan, repo: rows.RepoRecord, requested: str
    ) -> SetupOutcome:
        commands = setup_commands(
            plan.path, requested, repo.setup_script, self.settings.setup_commands
        )
        return await run_setup(commands, plan.path, plan.branch, self.settings.setup_timeout_secs)

    async def _repo(self, repo_id: str) -> rows.RepoRecord:
        repo = await self._reader.read(lambda c: rows.get_repo(c, repo_id)) if repo_id else None
        if repo is None:
            raise WorktreeError(
                Refusal.NOT_FOUND, f"no repository with id {repo_id!r}", {"repo_id": repo_id}
            )
        return repo

    # ---- read ----

    async def get(self, worktree_id: str) -> WorktreeView:
        record = await self._record(worktree_id)
        return (await self._views([record]))[0]

    async def list_worktrees(self, repo_id: str = "") -> list[WorktreeView]:
        records = await self._reader.read(lambda c: rows.list_worktrees(c, repo_id or None))
        return await self._views(records)

    async def find(self, name_or_id: str, repo_id: str = "") -> WorktreeView:
        """A worktree by id, or by name (unique in `repo_id`, or across repositories)."""
        record = await self._reader.read(lambda c: rows.get_worktree(c, name_or_id))
        if record is None:
            named = await self._reader.read(
                lambda c: rows.find_worktree_by_name(c, name_or_id, repo_id or None)
            )
            if len(named) > 1:
                raise WorktreeError(
                    Refusal.INVALID,
                    f"{len(named)} repositories have a worktree called {name_or_id!r}; "
                    "name the repository",
                )
            record = named[0] if named else None
        if record is None:
            raise _not_found(name_or_id)
        return (await self._views([record]))[0]

    async def _record(self, worktree_id: str) -> rows.WorktreeRecord:
        record = await self._reader.read(lambda c: rows.get_worktree(c, worktree_id))
        if record is None:
            raise _not_found(worktree_id)
        return record

    async def _views(self, records: Sequence[rows.WorktreeRecord]) -> list[WorktreeView]:
        present = await asyncio.to_thread(lambda: [checkout.is_checkout(r.path) for r in records])
        # Once per daemon run each: startup reconciliation may have flagged it already, but
        # git still has to forget it.
        newly_stale = [
            r
            for r, here in zip(records, present, strict=True)
            if not here and r.id not in self._seen_missing
        ]
        if newly_stale:
            self._seen_missing.update(r.id for r in newly_stale)
            await self._mark_stale(newly_stale)
        return [WorktreeView(record, here) for record, here in zip(records, present, strict=True)]

    async def _mark_stale(self, records: Sequence[rows.WorktreeRecord]) -> None:
        """WT-10: an externally deleted worktree is flagged and git forgets it."""
        for record in records:
            log.warning("Worktree %s directory missing: %s", record.id, record.path)
        await self._writer.call(lambda c: rows.set_stale(c, [r.id for r in records]))
        for repo_path in {record.repo_path for record in records}:
            async with self.repo_lock(repo_path):
                await git(repo_path, "worktree", "prune")

    # ---- remove ----

    async def at_risk(self, worktree_id: str) -> list[str]:
        """What removing the worktree now would lose (empty: nothing)."""
        record = await self._record(worktree_id)
        async with self.repo_lock(record.repo_path):
            return (await self._assess(record)).describe()

    async def remove(self, worktree_id: str, *, force: bool = False) -> Removal:
        record = await self._record(worktree_id)
        async with self.repo_lock(record.repo_path):
            risk = await self._assess(record)
            at_risk = risk.describe()
            if at_risk and not force:
                raise WorkAtRisk(record.name, at_risk)
            saved = await self._save(record, risk, at_risk) if risk.loses_git_work else None
            closed = await self.sessions.close_worktree_sessions(record.id)
            await checkout.remove(record, exists=risk.exists)
            if record.branch_created and (saved is not None or not risk.commits):
                await checkout.delete_branch(Path(record.repo_path), record.branch)
            await self._writer.call(lambda c: rows.delete_worktree(c, record.id))
        log.info(
            "worktree %s removed (%s)%s",
            record.name,
            record.path,
            f"; its work was saved under {saved.ref}" if saved else "",
        )
        return Removal(closed, saved, at_risk if force else [])

    async def _assess(self, record: rows.WorktreeRecord) -> Risk:
        path, repo = Path(record.path), Path(record.repo_path)
        exists = await asyncio.to_thread(checkout.is_checkout, record.path)
        dirty = await safety.dirty_files(path) if exists else safety.DirtyFiles([], [])
        head = await safety.head_commit(path) if exists else None
        tips = [head] if head else []
        if record.branch_created and await checkout.branch_exists(repo, record.branch):
            tips.append(f"refs/heads/{record.branch}")
        commits = (
            await safety.unmerged_commits(
                repo,
                tips,
                dropped_branch=record.branch if record.branch_created else None,
                base_branch=record.base_branch,
            )
            if tips
            else []
        )
        approvals = await self._reader.read(lambda c: rows.open_approvals(c, record.id))
        busy = list(self.sessions.busy_in_worktree(record.id))
        if approvals:
            busy.append(
                f"{approvals} pending approval{'s' if approvals != 1 else ''} "
                "in the worktree's sessions"
            )
        return Risk(exists, head, dirty, commits, record.base_branch, busy)

    async def _save(
        self, record: rows.WorktreeRecord, risk: Risk, at_risk: list[str]
    ) -> rows.RescueRecord:
        rescue_id = uuid.uuid4().hex[:12]
        path, repo = Path(record.path), Path(record.repo_path)
        head = (
            risk.head
            or (
                await git_ok(
                    repo,
                    "rev-parse",
                    f"refs/heads/{record.branch}",
                    what="reading the branch failed",
                )
            ).strip()
        )
        work = (
            await rescue.snapshot_work(
                path, head, f"betcode rescue {rescue_id}: uncommitted work of {record.name}"
            )
            if risk.dirty.any
            else None
        )
        ref = await rescue.set_rescue_ref(repo, rescue_id, work or head)
        saved = rows.RescueRecord(
            id=rescue_id,
            repo_path=record.repo_path,
            worktree_name=record.name,
            worktree_path=record.path,
            branch=record.branch,
            ref=ref,
            head_commit=head,
            work_commit=work,
            at_risk=at_risk,
            created_at=time.time(),
        )
        await self._writer.call(lambda c: rows.insert_rescue(c, saved))
        return saved

    # ---- rescues ----

    async def rescues(self) -> list[rows.RescueRecord]:
        return await self._reader.read(rows.list_rescues)

    async def restore(self, rescue_id: str) -> WorktreeView:
        """A new worktree holding a rescue: its commits on a new branch, its files as they
        were (uncommitted changes stay uncommitted, untracked files untracked)."""
        saved = await self._reader.read(lambda c: rows.get_rescue(c, rescue_id))
        if saved is None:
            raise WorktreeError(
                Refusal.NOT_FOUND, f"no rescue with id {rescue_id!r}", {"rescue_id": rescue_id}
            )
        repo = await self._reader.read(lambda c: rows.find_repo_by_path(c, saved.repo_path))
        if repo is None:
            raise WorktreeError(
                Refusal.PRECONDITION,
                f"the repository {saved.repo_path} is no longer registered; register it again",
                {"repo_path": saved.repo_path},
            )
        suffix = f"rescue-{saved.id[:8]}"
        view = await self.create(
            name=f"{saved.worktree_name}-{suffix}"[-100:].lstrip("-._"),
            repo_id=repo.id,
            branch=f"{saved.branch}-{suffix}",
            create_branch=True,
            start_point=saved.head_commit,
            run_setup_hooks=False,
        )
        if saved.work_commit:
            await rescue.put_back_work(Path(view.record.path), saved.work_commit)
        # The sessions of the removed worktree go on in the restored one.
        moved = await self.sessions.move_all(saved.worktree_path, view.record.path, view.record.id)
        if moved:
            log.info("rescue %s: sessions %s moved to %s", saved.id, moved, view.record.path)
        return view


@dataclass(frozen=True, slots=True)
class Risk:
    exists: bool
    head: str | None
    dirty: safety.DirtyFiles
    commits: list[str]
    base_branch: str | None
    busy: list[str]

    @property
    def loses_git_work(self) -> bool:
        return self.dirty.any or bool(self.commits)

    def describe(self) -> list[str]:
        found = self.dirty.describe()
        if self.commits:
            found.append(safety.describe_commits(self.commits, self.base_branch))
        return found + self.busy


def _new_record(
    name: str, repo: rows.RepoRecord, plan: checkout.Plan, setup_script: str, setup: SetupOutcome
) -> rows.WorktreeRecord:
    now = time.time()
    return rows.WorktreeRecord(
        id=str(uuid.uuid4()),
        name=name,
        path=str(plan.path),
        branch=plan.branch,
        repo_path=repo.repo_path,
        repo_id=repo.id,
        base_branch=plan.base_branch,
        branch_created=plan.creates_branch,
        setup_script=setup_script or None,
        setup_status=setup.status,
        setup_error=setup.error,
        stale=False,
        created_at=now,
        last_active=now,
        session_count=0,
    )


def _not_found(worktree: str) -> WorktreeError:
    return WorktreeError(Refusal.NOT_FOUND, f"no worktree {worktree!r}", {"worktree_id": worktree})
