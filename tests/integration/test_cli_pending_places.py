"""`betcode permissions pending` names the asking session and where it runs (real daemon and
CLI, mock model): its name, and its worktree and branch."""

from __future__ import annotations

import json

import pytest
from harness.cli_process import betcode, finish, spawn
from harness.daemon import InProcessDaemon
from harness.environment import Workspace
from test_cli_run import ALLOW_HINT, BASH_PROMPT, stderr_until

pytestmark = pytest.mark.real_cli


async def test_a_waiting_request_names_its_session_and_worktree(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    socket, repo = daemon.socket, workspace.repo
    running = await spawn(socket, repo, "run", BASH_PROMPT, "--worktree", "fix-login")
    request_id = await stderr_until(running, ALLOW_HINT)
    [row] = json.loads((await betcode(socket, repo, "permissions", "pending", "--json")).out)
    session_id = row["session_id"]
    await betcode(socket, repo, "sessions", "rename", session_id, "login")

    listed = await betcode(socket, repo, "permissions", "pending")
    first = listed.out.splitlines()[0]
    assert first.startswith(f"{request_id}  Bash  session {session_id[:8]} (login)")
    assert first.endswith("in worktree fix-login (branch fix-login)")
    [row] = json.loads((await betcode(socket, repo, "permissions", "pending", "--json")).out)
    assert (row["session_name"], row["worktree"], row["branch"]) == (
        "login",
        "fix-login",
        "fix-login",
    )
    denied = await betcode(socket, repo, "permissions", "deny", request_id[:8])  # a start of it
    assert denied.out.startswith(f"{request_id}: ")
    await finish(running)
