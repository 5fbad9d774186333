"""`betcode sessions` against a real daemon (pinned real CLI, mock model). The runs that make
the sessions are real processes; the sessions commands run in a worker thread through click's
runner (the same code, without a Python start-up per call)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness.cli_process import Finished, finish, spawn
from harness.cli_process import betcode as betcode_process
from harness.daemon import InProcessDaemon
from harness.environment import Workspace
from test_cli_run import ALLOW_HINT, BASH_PROMPT, stderr_until

from betcode.cli.main import cli


async def betcode(socket: Path, cwd: Path, *args: str, stdin: bytes | None = None) -> Finished:
    if args[0] != "sessions":
        return await betcode_process(socket, cwd, *args, stdin=stdin)
    runner = CliRunner()
    command = [*args, "--socket", str(socket)]
    text = stdin.decode() if stdin is not None else None
    result = await asyncio.to_thread(runner.invoke, cli, command, input=text)
    return Finished(result.exit_code, result.stdout, result.stderr)


pytestmark = pytest.mark.real_cli


async def test_list_show_grants_rename_and_delete(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    socket, repo = daemon.socket, workspace.repo
    assert (await betcode(socket, repo, "sessions", "list")).out == "No sessions.\n"
    plain = json.loads((await betcode(socket, repo, "run", "SCN:plain", "--output", "json")).out)
    running = await spawn(socket, repo, "run", BASH_PROMPT, "--output", "json")
    request_id = await stderr_until(running, ALLOW_HINT)
    await betcode(socket, repo, "permissions", "allow", request_id, "--session-wide")
    granted = json.loads((await finish(running)).out)
    plain_id, granted_id = plain["session_id"], granted["session_id"]

    listed = await betcode(socket, repo, "sessions", "list")
    header, *rows = listed.out.splitlines()
    assert header.split() == [
        "ID",
        "NAME",
        "STATUS",
        "ACTIVE",
        "EVENTS",  # stored lines, not messages said (dozens per prompt)
        "COST",
        "DIRECTORY",
        "LAST",
        "MESSAGE",
    ]
    assert [row.split()[0] for row in rows] == [granted_id[:8], plain_id[:8]]  # latest first
    assert rows[0].endswith(BASH_PROMPT)
    as_json = json.loads((await betcode(socket, repo, "sessions", "list", "--json")).out)
    assert [(s["id"], s["working_directory"]) for s in as_json] == [
        (granted_id, str(repo)),
        (plain_id, str(repo)),
    ]
    elsewhere = await betcode(socket, repo, "sessions", "list", "--cwd", str(workspace.home))
    assert elsewhere.out.startswith("No sessions.")

    grants = await betcode(socket, repo, "sessions", "grants", granted_id[:8], "--json")
    [grant] = json.loads(grants.out)
    assert grant["action"] == "allow"
    assert grant["rule"].startswith("Bash(")
    shown = json.loads(
        (await betcode(socket, repo, "sessions", "show", granted_id[:6], "--json")).out
    )
    assert (shown["id"], shown["grants"], shown["pending"]) == (granted_id, [grant], [])
    assert shown["total_cost_usd"] > 0
    text = (await betcode(socket, repo, "sessions", "show", plain_id)).out
    assert f"session       {plain_id}" in text
    assert "grants        none" in text

    renamed = await betcode(socket, repo, "sessions", "rename", plain_id[:8], "greeting")
    assert renamed.code == 0
    listed = json.loads((await betcode(socket, repo, "sessions", "list", "--json")).out)
    assert {s["id"]: s["name"] for s in listed}[plain_id] == "greeting"

    kept = await betcode(socket, repo, "sessions", "delete", plain_id, stdin=b"n\n")
    assert kept.code == 1
    assert "(greeting) and its " in kept.out
    assert " stored events? [y/N]" in kept.out
    deleted = await betcode(socket, repo, "sessions", "delete", plain_id, "--yes")
    assert (deleted.code, deleted.out.strip()) == (0, f"deleted {plain_id}")
    listed = json.loads((await betcode(socket, repo, "sessions", "list", "--json")).out)
    assert [s["id"] for s in listed] == [granted_id]


UNKNOWN_SESSION_COMMANDS = [
    ["show", "no-such-id"],
    ["show", "no-such-id", "--json"],
    ["grants", "no-such-id"],
    ["rename", "no-such-id", "name"],
    ["delete", "no-such-id", "--yes"],
]


async def test_an_unknown_session_exits_6_with_a_hint(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    for args in UNKNOWN_SESSION_COMMANDS:
        done = await betcode(daemon.socket, workspace.repo, "sessions", *args)
        assert (done.code, done.out) == (6, ""), args
        assert "no session 'no-such-id' in the daemon; `betcode sessions list` shows them" in (
            done.err
        )
