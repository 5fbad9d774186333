"""Rescue refs: what a forced removal saves before it destroys anything.

The worktree's uncommitted and untracked (not ignored) files become one commit on top of its
HEAD, built through a temporary index so neither the worktree nor its index is touched; the
ref `refs/betcode/rescue/<id>` then keeps that commit and every commit below it alive in the
repository. Restoring checks the saved HEAD out on a new branch in a new worktree and puts
the saved files back as uncommitted and untracked files, as they were.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from betcode.worktrees.git import git_ok

RESCUE_REF_PREFIX = "refs/betcode/rescue/"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "betcode",
    "GIT_AUTHOR_EMAIL": "betcode@localhost",
    "GIT_COMMITTER_NAME": "betcode",
    "GIT_COMMITTER_EMAIL": "betcode@localhost",
}


async def snapshot_work(worktree: Path, head: str, message: str) -> str:
    """A commit (parent `head`) holding the worktree's files as they are now."""
    with tempfile.TemporaryDirectory(prefix="betcode-rescue-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index"), **_IDENTITY}
        await git_ok(worktree, "read-tree", head, env=env, what="saving the work failed")
        await git_ok(worktree, "add", "-A", env=env, what="saving the work failed")
        tree = await git_ok(worktree, "write-tree", env=env, what="saving the work failed")
        commit = await git_ok(
            worktree,
            "commit-tree",
            tree.strip(),
            "-p",
            head,
            "-m",
            message,
            env=env,
            what="saving the work failed",
        )
    return commit.strip()


async def set_rescue_ref(repo: Path, rescue_id: str, commit: str) -> str:
    ref = RESCUE_REF_PREFIX + rescue_id
    await git_ok(repo, "update-ref", ref, commit, "", what="writing the rescue ref failed")
    return ref


async def put_back_work(checkout: Path, work_commit: str) -> None:
    """Make `checkout`'s files those of `work_commit` (whose parent is its HEAD), leaving
    them uncommitted: the index is reset to HEAD afterwards."""
    await git_ok(
        checkout, "read-tree", "-m", "-u", "HEAD", work_commit, what="restoring the files failed"
    )
    await git_ok(checkout, "reset", "-q", what="restoring the files failed")
