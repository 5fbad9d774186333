"""The git side of a worktree's life: validate and plan, add (undoably), remove.

`plan` checks everything that can be known before touching anything (WT-09): the target path,
the branch (checked out elsewhere, missing, or already there), the disk space. `add` records
each thing it changes so `undo` can take exactly those back if a later step fails.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from betcode.storage.worktrees import RepoRecord, WorktreeRecord
from betcode.worktrees.errors import Refusal, WorktreeError
from betcode.worktrees.git import git, git_failure, git_ok
from betcode.worktrees.paths import Placement

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Plan:
    repo: Path
    path: Path
    root: Path
    branch: str
    creates_branch: bool
    start_point: str | None
    base_branch: str | None  # the repository's current branch: what "merged" means
    gitignore_entry: str | None  # a LOCAL placement's line to add to .gitignore


@dataclass(slots=True)
class Made:
    """What `add` changed, for `undo`."""

    plan: Plan
    gitignore_before: bytes | None = None
    gitignore_changed: bool = False
    branch_made: bool = False
    directory_made: bool = False
    notes: list[str] = field(default_factory=list)


def is_checkout(path: str | Path) -> bool:
    """A worktree directory that is still there and still a git checkout (its `.git` file):
    a directory without it would let git fall through to an enclosing repository."""
    return os.path.isdir(path) and os.path.exists(os.path.join(path, ".git"))


async def branch_exists(repo: Path, branch: str) -> bool:
    result = await git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
    return result.ok


async def checked_out_at(repo: Path, branch: str) -> str | None:
    """The worktree (main checkout included) that has `branch` checked out, if any."""
    out = await git_ok(repo, "worktree", "list", "--porcelain", what="git worktree list failed")
    current = None
    for line in out.splitlines():
        if line.startswith("worktree "):
            current = line.removeprefix("worktree ")
        elif line == f"branch refs/heads/{branch}":
            return current
    return None


async def plan(
    repo: RepoRecord,
    placement: Placement,
    branch: str,
    create_branch: bool | None,
    start_point: str | None,
) -> Plan:
    repo_path = Path(repo.repo_path)
    if await asyncio.to_thread(os.path.lexists, placement.path):
        raise WorktreeError(
            Refusal.EXISTS,
            f"the worktree path {placement.path} already exists",
            {"path": str(placement.path)},
        )
    exists = await branch_exists(repo_path, branch)
    if exists and create_branch:
        raise WorktreeError(Refusal.EXISTS, f"branch {branch!r} already exists", {"branch": branch})
    if not exists and create_branch is False:
        raise WorktreeError(
            Refusal.NOT_FOUND,
            f"branch {branch!r} does not exist; ask for it to be created",
            {"branch": branch},
        )
    if exists and (elsewhere := await checked_out_at(repo_path, branch)) is not None:
        raise WorktreeError(
            Refusal.EXISTS,
            f"branch {branch!r} is already checked out at {elsewhere}",
            {"branch": branch, "path": elsewhere},
        )
    current = await git(repo_path, "symbolic-ref", "--quiet", "--short", "HEAD")
    entry = None
    if repo.worktree_mode == "local" and repo.auto_gitignore:
        entry = "/" + placement.root.relative_to(repo_path).as_posix() + "/"
    return Plan(
        repo=repo_path,
        path=placement.path,
        root=placement.root,
        branch=branch,
        creates_branch=not exists,
        start_point=start_point,
        base_branch=current.stdout.strip() if current.ok else None,
        gitignore_entry=entry,
    )


async def check_space(plan: Plan, min_free_bytes: int) -> None:
    """RESOURCE_EXHAUSTED when the checkout (the size of the files at its start commit) would
    leave less than `min_free_bytes` free."""
    start = plan.start_point or (plan.branch if not plan.creates_branch else "HEAD")
    listing = await git(plan.repo, "ls-tree", "-r", "-l", "--full-tree", start)
    needed = sum(
        int(fields[3])
        for line in listing.stdout.splitlines()
        if len(fields := line.split(None, 4)) == 5 and fields[3].isdigit()
    )
    available = await asyncio.to_thread(_free_bytes, plan.path)
    if needed + min_free_bytes > available:
        raise WorktreeError(
            Refusal.NO_SPACE,
            f"not enough disk space for the worktree: it needs {needed} bytes and "
            f"{min_free_bytes} must stay free (daemon.worktree.min_free_bytes); "
            f"{available} are available",
            {"required_bytes": str(needed + min_free_bytes), "available_bytes": str(available)},
        )


def _free_bytes(path: Path) -> int:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return shutil.disk_usage(candidate).free
    return 0


async def add(plan: Plan) -> Made:
    """`git worktree add`; on failure everything it changed is taken back and INTERNAL
    (with git's stderr) raised."""
    made = Made(plan)
    try:
        if plan.gitignore_entry is not None:
            await asyncio.to_thread(_add_gitignore_line, made)
        args = ["worktree", "add"]
        args += ["-b", plan.branch, str(plan.path)] if plan.creates_branch else [str(plan.path)]
        args += [plan.start_point] if plan.creates_branch and plan.start_point else []
        args += [] if plan.creates_branch else [plan.branch]
        made.directory_made = True
        made.branch_made = plan.creates_branch
        result = await git(plan.repo, *args)
        if not result.ok:
            raise git_failure("Git worktree creation failed", result, args)
    except BaseException:
        await undo(made)
        raise
    return made


def _add_gitignore_line(made: Made) -> None:
    entry = made.plan.gitignore_entry
    gitignore = made.plan.repo / ".gitignore"
    before = gitignore.read_bytes() if gitignore.exists() else None
    if entry is None or (before is not None and entry in before.decode(errors="replace").split()):
        return
    text = (before or b"").decode(errors="replace")
    separator = "" if not text or text.endswith("\n") else "\n"
    gitignore.write_text(f"{text}{separator}{entry}\n", encoding="utf-8")
    made.gitignore_before, made.gitignore_changed = before, True


async def undo(made: Made) -> None:
    """Take back what `add` did: the directory it made, git's record of it, the branch, the
    .gitignore line. Used only for a create that failed part-way."""
    plan = made.plan
    if made.directory_made:
        await git(plan.repo, "worktree", "remove", "--force", str(plan.path))
        # The path did not exist before this create began (plan checked), so what is
        # there now is only what the failed checkout left.
        await asyncio.to_thread(_remove_partial, plan.path)
        await git(plan.repo, "worktree", "prune")
    if made.branch_made and await branch_exists(plan.repo, plan.branch):
        await git(plan.repo, "branch", "-D", plan.branch)
    if made.gitignore_changed:
        await asyncio.to_thread(_restore_gitignore, made)


def _remove_partial(path: Path) -> None:
    if os.path.lexists(path):
        shutil.rmtree(path)


def _restore_gitignore(made: Made) -> None:
    gitignore = made.plan.repo / ".gitignore"
    if made.gitignore_before is None:
        gitignore.unlink(missing_ok=True)
    else:
        gitignore.write_bytes(made.gitignore_before)


async def remove(record: WorktreeRecord, *, exists: bool) -> None:
    """`git worktree remove` (only once nothing is at risk or it was saved), or `git worktree
    prune` for a directory already gone. Nothing else ever deletes a worktree's files."""
    repo = Path(record.repo_path)
    if not exists:
        await git(repo, "worktree", "prune")
        return
    # --force: the check that matters was made (safety.py) or the work saved; what git would
    # still refuse for is ignored files (build output), which are not work.
    result = await git(repo, "worktree", "remove", "--force", record.path)
    if not result.ok:
        raise git_failure(
            f"git did not remove the worktree at {record.path}; it was left as it is",
            result,
            ["worktree", "remove", "--force", record.path],
        )


async def delete_branch(repo: Path, branch: str) -> None:
    """Delete a branch the daemon created, once nothing on it would be lost; a branch git
    keeps (checked out elsewhere) is logged and left."""
    if not await branch_exists(repo, branch):
        return
    result = await git(repo, "branch", "-D", branch)
    if not result.ok:
        log.warning("branch %s of %s was kept: %s", branch, repo, result.stderr.strip())
