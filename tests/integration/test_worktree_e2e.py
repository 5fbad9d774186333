"""Parallel sessions in worktrees, as a user runs them: two `betcode run --worktree` processes
against a real daemon running the pinned real CLI (mock model), each writing a file through an
approved Write call; then `betcode worktree` removing, forcing and restoring."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness.cli_process import Finished
from harness.cli_process import betcode as betcode_process
from harness.daemon import InProcessDaemon
from harness.environment import Workspace
from harness.git_repos import make_repository, sh

from betcode.cli.connection import DaemonClient, resolve_daemon_address
from betcode.cli.main import cli
from betcode.cli.worktree_target import session_branch

pytestmark = pytest.mark.real_cli


async def betcode(socket: Path, *args: str) -> Finished:
    """A short `betcode` command through click's runner, in a worker thread."""
    result = await asyncio.to_thread(CliRunner().invoke, cli, [*args, "--socket", str(socket)])
    return Finished(result.exit_code, result.stdout, result.stderr)


def write_prompt(name: str, text: str) -> str:
    return "SCN:tool_write " + json.dumps({"file_path": name, "content": text})


async def test_two_sessions_in_two_worktrees_each_change_only_their_own(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    socket, repo = daemon.socket, workspace.repo
    runs = await asyncio.gather(
        betcode_process(
            socket, repo, "run", write_prompt("a.txt", "from a\n"), "--worktree", "wa", "--yes"
        ),
        betcode_process(
            socket, repo, "run", write_prompt("b.txt", "from b\n"), "--worktree", "wb", "--yes"
        ),
    )
    for finished in runs:
        assert finished.code == 0, finished.err

    listed = json.loads((await betcode(socket, "worktree", "list", "--json")).out)
    by_name = {w["name"]: w for w in listed}
    assert sorted(by_name) == ["wa", "wb"]
    wa, wb = Path(by_name["wa"]["path"]), Path(by_name["wb"]["path"])
    assert (wa / "a.txt").read_text() == "from a\n"
    assert (wb / "b.txt").read_text() == "from b\n"
    assert not (wa / "b.txt").exists()
    assert not (wb / "a.txt").exists()
    assert not (repo / "a.txt").exists()
    assert not (repo / "b.txt").exists()
    assert sh(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert [by_name[n]["session_count"] for n in ("wa", "wb")] == [1, 1]
    assert sh(wa, "symbolic-ref", "--short", "HEAD").strip() == "wa"
    # What the chat's status bar shows for a session continued there.
    async with await DaemonClient.connect(resolve_daemon_address(socket)) as client:
        sessions = (await client.list_sessions()).sessions
        in_wa = next(s.id for s in sessions if s.worktree_id == by_name["wa"]["id"])
        assert await session_branch(client, in_wa) == "wa"
        assert await session_branch(client, "") == ""

    refused = await betcode(socket, "worktree", "remove", "wa")
    assert refused.code == 1  # a failed precondition (docs/CLI.md#exit-codes)
    assert "1 untracked file (a.txt)" in refused.err
    assert (wa / "a.txt").exists()

    forced = await betcode(socket, "worktree", "remove", "wa", "--force")
    assert forced.code == 0, forced.err
    assert "Saved under refs/betcode/rescue/" in forced.out
    assert not (wa / "a.txt").exists()
    rescues = json.loads((await betcode(socket, "worktree", "rescue", "list", "--json")).out)
    assert [r["worktree_name"] for r in rescues] == ["wa"]

    restored = await betcode(socket, "worktree", "rescue", "restore", rescues[0]["id"], "--json")
    assert restored.code == 0, restored.err
    back = Path(json.loads(restored.out)["path"])
    assert (back / "a.txt").read_text() == "from a\n"
    # The removed worktree's session goes on in the restored one.
    listed_sessions = json.loads((await betcode(socket, "sessions", "list", "--json")).out)
    [moved] = [s for s in listed_sessions if s["id"] == in_wa]
    assert moved["working_directory"] == str(back)
    assert moved["worktree_id"] == json.loads(restored.out)["id"]
    again = await betcode(socket, "run", "--session", in_wa, 'SCN:plain {"text": "back"}')
    assert again.code == 0, again.err


async def test_repo_and_worktree_commands_and_their_exit_codes(
    daemon: InProcessDaemon, tmp_path: Path
) -> None:
    socket = daemon.socket
    (tmp_path / "git").mkdir()
    _, repo = make_repository(tmp_path / "git")
    registered = await betcode(socket, "repo", "register", str(repo), "--name", "proj", "--json")
    assert registered.code == 0, registered.err
    assert json.loads(registered.out)["name"] == "proj"
    again = await betcode(socket, "repo", "register", str(repo))
    assert again.code == 5  # ALREADY_EXISTS: a user error (docs/CLI.md#exit-codes), not 7
    assert "already registered" in again.err

    updated = await betcode(socket, "repo", "update", "proj", "--mode", "local", "--json")
    assert json.loads(updated.out)["worktree_mode"] == "WORKTREE_MODE_LOCAL"
    listed = await betcode(socket, "repo", "list")
    assert listed.out.splitlines()[1].split()[1:4] == ["proj", "local", "0"]
    scanned = await betcode(socket, "repo", "scan", str(tmp_path / "git"))
    assert "1 repositories." in scanned.out

    bad = await betcode(socket, "worktree", "create", "a/b", "--repo", "proj")
    assert bad.code == 5
    missing = await betcode(socket, "worktree", "create", "x", "--repo", "proj", "--branch", "no")
    assert missing.code == 6  # NOT_FOUND: an existing branch was asked for
    assert "branch 'no' does not exist" in missing.err
    created = await betcode(
        socket, "worktree", "create", "x", "--repo", "proj", "--branch", "no", "--new-branch"
    )
    assert created.code == 0, created.err
    made = json.loads((await betcode(socket, "worktree", "get", "x", "--json")).out)
    assert made["path"] == str(repo / ".worktree" / "x")
    assert made["branch"] == "no"
    unknown = await betcode(socket, "worktree", "get", "no-such-worktree")
    assert unknown.code == 6

    busy = await betcode(socket, "repo", "unregister", "proj")
    assert busy.code == 1
    assert "still has 1 worktree(s) (x)" in busy.err
    gone = await betcode(socket, "repo", "unregister", "proj", "--remove-worktrees")
    assert gone.code == 0, gone.err
    assert not (repo / ".worktree" / "x" / "README.md").exists()
    assert (await betcode(socket, "repo", "list")).out == "No repositories registered.\n"
