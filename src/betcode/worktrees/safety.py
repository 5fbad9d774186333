"""What removing a worktree would lose (issue 13): the analysis behind a refused removal.

Work at risk is: uncommitted changes; untracked files that are not ignored; commits that
would become unreachable — reachable from no other branch, tag or remote-tracking branch and
not merged into the base branch. A squash- or rebase-merged branch counts as merged when its
changes are already in the base: merging it into the base would change nothing (git
merge-tree), or every commit has an equivalent patch there (git cherry).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from betcode.worktrees.git import git, git_ok

MAX_LISTED = 50  # paths/commits named in a refusal; the rest are counted


@dataclass(frozen=True, slots=True)
class DirtyFiles:
    uncommitted: list[str]
    untracked: list[str]

    def describe(self) -> list[str]:
        found = []
        if self.uncommitted:
            found.append(_listing("uncommitted change", "uncommitted changes", self.uncommitted))
        if self.untracked:
            found.append(_listing("untracked file", "untracked files", self.untracked))
        return found

    @property
    def any(self) -> bool:
        return bool(self.uncommitted or self.untracked)


async def dirty_files(worktree: Path) -> DirtyFiles:
    """Changed tracked files and untracked, not ignored, files of a checkout."""
    out = await git_ok(
        worktree,
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignore-submodules=none",
        what="git status failed",
    )
    uncommitted: list[str] = []
    untracked: list[str] = []
    entries = iter(out.split("\0"))
    for entry in entries:
        if not entry:
            continue
        code, path = entry[:2], entry[3:]
        if code == "??":
            untracked.append(path)
        else:
            uncommitted.append(path)
            if code[0] in "RC":
                next(entries, None)  # the rename's source path
    return DirtyFiles(uncommitted, untracked)


async def head_commit(checkout: Path) -> str | None:
    """The commit HEAD names (None on an unborn branch)."""
    result = await git(checkout, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    return result.stdout.strip() if result.ok else None


async def unmerged_commits(
    repo: Path, tips: Sequence[str], *, dropped_branch: str | None, base_branch: str | None
) -> list[str]:
    """Commits of `tips` that would be lost if `dropped_branch` went (None: no branch is
    deleted, only a detached HEAD's commits can be lost), as "<short sha> <subject>"."""
    exclude = [f"--exclude={dropped_branch}"] if dropped_branch else []
    out = await git_ok(
        repo,
        "log",
        "--format=%h %s",
        *tips,
        "--not",
        *exclude,
        "--branches",
        "--tags",
        "--remotes",
        what="git log failed",
    )
    commits = out.splitlines()
    if commits and base_branch and await _changes_in_base(repo, tips, base_branch):
        return []
    return commits


async def _changes_in_base(repo: Path, tips: Sequence[str], base: str) -> bool:
    for tip in tips:
        if not await _tip_in_base(repo, tip, base):
            return False
    return True


async def _tip_in_base(repo: Path, tip: str, base: str) -> bool:
    base_ref = f"refs/heads/{base}"
    base_tree = await git(repo, "rev-parse", "--verify", "--quiet", f"{base_ref}^{{tree}}")
    if not base_tree.ok:
        return False
    merged = await git(repo, "merge-tree", "--write-tree", base_ref, tip)
    if merged.ok and merged.stdout.split("\n", 1)[0].strip() == base_tree.stdout.strip():
        return True  # merging it would change nothing: its changes are in the base
    cherry = await git(repo, "cherry", base_ref, tip)
    lines = cherry.stdout.splitlines()
    return cherry.ok and all(line.startswith("-") for line in lines)  # each patch is there


def describe_commits(commits: list[str], base_branch: str | None) -> str:
    where = f"not merged into {base_branch}" if base_branch else "not merged into any branch"
    return _listing("commit", "commits", commits, f" on no other branch and {where}")


def _listing(singular: str, plural: str, items: list[str], qualifier: str = "") -> str:
    shown = ", ".join(items[:MAX_LISTED])
    if len(items) > MAX_LISTED:
        shown += f", ... and {len(items) - MAX_LISTED} more"
    noun = singular if len(items) == 1 else plural
    return f"{len(items)} {noun}{qualifier} ({shown})"
