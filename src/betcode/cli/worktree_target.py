"""`--worktree NAME` of `betcode run` and `betcode chat`: the worktree a session runs in.

NAME is found among the daemon's worktrees, or created in the repository around the current
directory (registered on the way when it is not yet).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from betcode.cli.connection import DaemonClient, RequestRejected, SessionNotFound
from betcode.cli.repo_cmd import repos
from betcode.core.errors import ErrorCode
from betcode.v1 import git_repo_pb2, worktree_pb2, worktree_pb2_grpc

ALREADY_EXISTS = ErrorCode.ALREADY_EXISTS.value


class NotInRepository(RequestRejected):
    exit_code = 5


def worktrees(client: DaemonClient) -> worktree_pb2_grpc.WorktreeServiceStub:
    return client.service_stub(worktree_pb2_grpc.WorktreeServiceStub)


async def open_worktree(client: DaemonClient, name: str, cwd: str) -> worktree_pb2.WorktreeDetail:
    try:
        return await client.call(
            worktrees(client).GetWorktree, worktree_pb2.GetWorktreeRequest(id=name)
        )
    except SessionNotFound:  # NOT_FOUND: make it
        pass
    repo = await repo_around(client, cwd)
    request = worktree_pb2.CreateWorktreeRequest(name=name, repo_id=repo.id)
    return await client.call(worktrees(client).CreateWorktree, request)


async def session_branch(client: DaemonClient, session_id: str) -> str:
    """The branch of the worktree session `session_id` runs in ("" if none, or gone)."""
    if not session_id:
        return ""
    sessions = (await client.list_sessions()).sessions
    worktree_id = next((s.worktree_id for s in sessions if s.id == session_id), "")
    if not worktree_id:
        return ""
    request = worktree_pb2.GetWorktreeRequest(id=worktree_id)
    try:
        detail: worktree_pb2.WorktreeDetail = await client.call(
            worktrees(client).GetWorktree, request
        )
    except SessionNotFound:  # the worktree was removed since
        return ""
    return detail.branch


async def repo_around(client: DaemonClient, cwd: str) -> git_repo_pb2.GitRepoDetail:
    """The registered repository `cwd` belongs to (from any of its worktrees too)."""
    top = await asyncio.to_thread(_main_checkout, cwd)
    try:
        return await client.call(repos(client).GetRepo, git_repo_pb2.GetRepoRequest(id=top))
    except SessionNotFound:
        pass
    request = git_repo_pb2.RegisterRepoRequest(repo_path=top, auto_gitignore=True)
    try:
        return await client.call(repos(client).RegisterRepo, request)
    except RequestRejected as error:
        if error.code != ALREADY_EXISTS:
            raise
    # Another `--worktree` run registered it in the meantime.
    return await client.call(repos(client).GetRepo, git_repo_pb2.GetRepoRequest(id=top))


def _main_checkout(cwd: str) -> str:
    done = subprocess.run(
        ["git", "-C", cwd, "rev-parse", "--path-format=absolute", "--git-common-dir"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise NotInRepository(
            f"{cwd} is not in a git repository, so no worktree can be made from here: run it "
            "inside the repository, or name one with `betcode worktree create --repo`"
        )
    common = Path(done.stdout.strip())
    return str((common.parent if common.name == ".git" else common).resolve())
