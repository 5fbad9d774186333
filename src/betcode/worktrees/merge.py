"""Finishing a worktree's task: its diff against its base branch, and merging its branch into
that base (a merge commit, or one squashed commit).

A merge never leaves the base half-merged. The merged tree is computed by `git merge-tree
--write-tree`, which touches no checkout: a conflict is refused before anything changes,
naming the files. The commit is made from that tree (`git commit-tree`), and only then is the
base moved to it, in one step: a fast-forward of the checkout that has the base branch (refused
while it has uncommitted changes to tracked files), or a compare-and-swap of the branch ref
when no checkout has it. Either step fails whole if the base moved meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from betcode.storage.worktrees import WorktreeRecord
from betcode.worktrees.errors import Refusal, WorktreeError
from betcode.worktrees.git import git, git_failure, git_ok
from betcode.worktrees.manager import WorktreeManager

NO_IDENTITY_HINTS = ("tell me who you are", "identity unknown", "empty ident")
MAX_LISTED = 20  # files named in a refusal


@dataclass(frozen=True, slots=True)
class WorktreeDiff:
    base_branch: str
    merge_base: str
    diff: str  # tracked files: the merge base against the worktree's files as they are now
    untracked: list[str]


@dataclass(frozen=True, slots=True)
class Merged:
    base_branch: str
    commit: str  # the new tip of the base branch
    commits: int  # commits of the worktree's branch it brought in


async def diff(manager: WorktreeManager, worktree_id: str, *, stat: bool = False) -> WorktreeDiff:
    record = (await manager.get(worktree_id)).record
    base = await _base_branch(record)
    path = _checkout(record)
    merge_base = (
        await git_ok(path, "merge-base", f"refs/heads/{base}", "HEAD", what="finding the base")
    ).strip()
    args = ["diff", "--no-color", "--no-ext-diff", *(["--stat"] if stat else []), merge_base]
    changes = await git_ok(path, *args, what="diffing the worktree")
    listed = await git_ok(
        path, "ls-files", "--others", "--exclude-standard", what="listing untracked files"
    )
    return WorktreeDiff(base, merge_base, changes, listed.splitlines())


async def merge(
    manager: WorktreeManager, worktree_id: str, *, squash: bool = False, message: str = ""
) -> Merged:
    record = (await manager.get(worktree_id)).record
    repo = Path(record.repo_path)
    async with manager.repo_lock(record.repo_path):
        base = await _base_branch(record)
        if base == record.branch:
            raise _refused(f"worktree {record.name!r} is on its base branch {base!r} itself")
        uncommitted = await _status(_checkout(record), untracked=True)
        if uncommitted:
            raise _refused(
                f"worktree {record.name!r} has uncommitted changes, which a merge would leave "
                f"behind: {_listing(uncommitted)}. Commit them first",
                uncommitted,
            )
        base_commit = await _commit_of(repo, base)
        branch_commit = await _commit_of(repo, record.branch)
        count = int(
            await git_ok(
                repo, "rev-list", "--count", f"{base_commit}..{branch_commit}", what="counting"
            )
        )
        if count == 0:
            raise _refused(f"nothing to merge: {record.branch!r} has no commit that {base!r} lacks")
        base_checkout = await _checkout_of(repo, base)
        if base_checkout is not None:
            await _check_clean_base(base_checkout, base)
        tree = await _merged_tree(repo, record, base, base_commit, branch_commit)
        parents = ["-p", base_commit] + ([] if squash else ["-p", branch_commit])
        text = message or await _message(repo, record, base, base_commit, squash)
        commit = await _commit(repo, tree, parents, text)
        await _move_base(repo, base_checkout, base, base_commit, commit)
    return Merged(base, commit, count)


async def _base_branch(record: WorktreeRecord) -> str:
    if not record.base_branch:
        raise _refused(f"worktree {record.name!r} has no base branch on record")
    found = await git(
        record.repo_path, "rev-parse", "--verify", "--quiet", f"refs/heads/{record.base_branch}"
    )
    if not found.ok:
        raise WorktreeError(
            Refusal.NOT_FOUND,
            f"the base branch {record.base_branch!r} of worktree {record.name!r} no longer exists",
            {"branch": record.base_branch},
        )
    return record.base_branch


def _checkout(record: WorktreeRecord) -> Path:
    path = Path(record.path)
    if not path.is_dir():
        raise _refused(f"worktree {record.name!r} is no longer on disk ({record.path})")
    return path


async def _commit_of(repo: Path, branch: str) -> str:
    ref = f"refs/heads/{branch}^{{commit}}"
    return (await git_ok(repo, "rev-parse", "--verify", ref, what=f"reading {branch}")).strip()


async def _status(checkout: Path, *, untracked: bool) -> list[str]:
    flag = "--untracked-files=all" if untracked else "--untracked-files=no"
    out = await git_ok(checkout, "status", "--porcelain", flag, what="reading the status")
    return [line[3:] for line in out.splitlines() if line.strip()]


async def _merged_tree(
    repo: Path, record: WorktreeRecord, base: str, base_commit: str, branch_commit: str
) -> str:
    args = ("merge-tree", "--write-tree", "--name-only", "--no-messages")
    result = await git(repo, *args, base_commit, branch_commit)
    lines = result.stdout.splitlines()
    if result.returncode == 1 and lines:
        conflicted = sorted({name for name in lines[1:] if name})
        raise _refused(
            f"merging {record.branch!r} into {base!r} would conflict in {_listing(conflicted)}; "
            f"nothing was changed. Merge {base!r} into the worktree, resolve and commit there, "
            "then merge again",
            conflicted,
        )
    if not result.ok or not lines:
        raise git_failure("merging", result, [*args, base_commit, branch_commit])
    return lines[0].strip()


async def _message(
    repo: Path, record: WorktreeRecord, base: str, base_commit: str, squash: bool
) -> str:
    if not squash:
        return f"Merge branch '{record.branch}' (worktree {record.name}) into {base}"
    subjects = await git_ok(
        repo,
        "log",
        "--reverse",
        "--format=* %s",
        f"{base_commit}..refs/heads/{record.branch}",
        what="listing the commits",
    )
    return f"{record.branch} (worktree {record.name}), squashed\n\n{subjects}"


async def _commit(repo: Path, tree: str, parents: list[str], message: str) -> str:
    result = await git(repo, "commit-tree", tree, *parents, "-m", message)
    if result.ok:
        return result.stdout.strip()
    if any(hint in result.stderr.lower() for hint in NO_IDENTITY_HINTS):
        raise _refused(
            "git has no identity to write the merge commit with: set user.name and user.email "
            f"(git config) in {repo} or globally"
        )
    raise git_failure("writing the merge commit", result, ["commit-tree", tree, *parents])


async def _check_clean_base(checkout: Path, base: str) -> None:
    dirty = await _status(checkout, untracked=False)
    if dirty:
        raise _refused(
            f"the base branch {base!r} is checked out in {checkout} with uncommitted changes: "
            f"{_listing(dirty)}. Commit or stash them, then merge again (nothing was changed)",
            dirty,
        )


async def _move_base(
    repo: Path, checkout: Path | None, base: str, base_commit: str, commit: str
) -> None:
    """The base branch to `commit`: its checkout fast-forwarded (git refuses, changing
    nothing, if files changed since the check), else its ref swapped if still at
    `base_commit`."""
    if checkout is None:
        moved = await git(repo, "update-ref", f"refs/heads/{base}", commit, base_commit)
        if not moved.ok:
            raise _refused(f"{base!r} moved while merging; nothing was changed, merge again")
        return
    forwarded = await git(checkout, "merge", "--ff-only", "--quiet", commit)
    if not forwarded.ok:
        reason = forwarded.stderr.strip() or forwarded.stdout.strip()
        raise _refused(
            f"{base!r} in {checkout} could not take the merge ({reason}); nothing was changed"
        )


async def _checkout_of(repo: Path, branch: str) -> Path | None:
    """The checkout (the main one or a linked worktree) that has `branch`, if any."""
    out = await git_ok(repo, "worktree", "list", "--porcelain", what="listing checkouts")
    path: str | None = None
    for line in out.splitlines():
        if line.startswith("worktree "):
            path = line.removeprefix("worktree ")
        elif line == f"branch refs/heads/{branch}" and path is not None:
            return Path(path)
    return None


def _refused(message: str, files: list[str] | None = None) -> WorktreeError:
    return WorktreeError(Refusal.PRECONDITION, message, {"files": "\n".join(files or [])})


def _listing(files: list[str]) -> str:
    shown = ", ".join(files[:MAX_LISTED])
    return shown + (f" and {len(files) - MAX_LISTED} more" if len(files) > MAX_LISTED else "")
