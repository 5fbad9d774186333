"""One id lookup for every `betcode` command that takes an id (`cli/ids.py`), against a real
daemon: a full id, a unique start of it or a name works; an ambiguous start is refused with
the matches listed (exit 5); an unknown id is refused (exit 6) and changes nothing. The
commands run through click's runner in a worker thread; the sessions are made by the daemon's
session manager (no claude is started), with ids chosen so that two share a start."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from harness.daemon import InProcessDaemon
from harness.environment import Workspace

from betcode.cli.main import cli

ALPHA = "abcd1111-0000-4000-8000-000000000001"
BETA = "abcd2222-0000-4000-8000-000000000002"
GAMMA = "ef015555-0000-4000-8000-000000000003"
UNKNOWN = "0bad0bad"


async def betcode(daemon: InProcessDaemon, *args: str) -> Result:
    command = [*args, "--socket", str(daemon.socket)]
    return await asyncio.to_thread(CliRunner().invoke, cli, command)


@pytest.fixture
async def sessions(daemon: InProcessDaemon, workspace: Workspace) -> None:
    manager = daemon.daemon.sessions
    assert manager is not None
    for session_id, name in ((ALPHA, "alpha"), (BETA, "beta"), (GAMMA, "gamma")):
        await manager.create(
            working_directory=str(workspace.repo), session_id=session_id, name=name
        )


def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text("steps:\n  - id: one\n    prompt: 'SCN:plain one'\n")
    return path


def session_commands(reference: str, tmp_path: Path) -> list[list[str]]:
    """Every command with a session argument, naming the session `reference`."""
    return [
        ["sessions", "show", reference],
        ["sessions", "show", reference, "--json"],
        ["sessions", "grants", reference],
        ["sessions", "rename", reference, "renamed"],
        ["sessions", "delete", reference, "--yes"],
        ["run", "SCN:plain hello", "--session", reference],
        ["chat", "--session", reference],
        ["subagent", "spawn", "SCN:plain hi", "--parent", reference],
        ["subagent", "list", "--parent", reference],
        ["orchestrate", str(plan_file(tmp_path)), "--parent", reference],
    ]


OTHER_ID_COMMANDS = [
    ["permissions", "allow", UNKNOWN],
    ["permissions", "deny", UNKNOWN],
    ["permissions", "answer", UNKNOWN, "yes"],
    ["subagent", "watch", UNKNOWN],
    ["subagent", "send", UNKNOWN, "more"],
    ["subagent", "cancel", UNKNOWN],
    ["subagent", "revoke", UNKNOWN, "--reason", "no longer trusted here"],
    ["worktree", "get", UNKNOWN],
    ["worktree", "remove", UNKNOWN],
    ["worktree", "rescue", "restore", UNKNOWN],
]


async def listed_ids(daemon: InProcessDaemon) -> list[str]:
    listed = await betcode(daemon, "sessions", "list", "--json")
    return sorted(s["id"] for s in json.loads(listed.stdout))


@pytest.mark.usefixtures("sessions")
async def test_an_unknown_id_exits_6_and_changes_nothing(
    daemon: InProcessDaemon, tmp_path: Path
) -> None:
    before = await listed_ids(daemon)
    for args in [*session_commands(UNKNOWN, tmp_path), *OTHER_ID_COMMANDS]:
        done = await betcode(daemon, *args)
        assert (done.exit_code, done.stdout) == (6, ""), (args, done.output)
        assert UNKNOWN in done.stderr, args
    assert await listed_ids(daemon) == before
    subagents = await betcode(daemon, "subagent", "list", "--json")
    assert json.loads(subagents.stdout) == []  # no orchestration was started


@pytest.mark.usefixtures("sessions")
async def test_an_ambiguous_start_exits_5_listing_the_matches(
    daemon: InProcessDaemon, tmp_path: Path
) -> None:
    for args in session_commands("abcd", tmp_path):
        done = await betcode(daemon, *args)
        assert (done.exit_code, done.stdout) == (5, ""), (args, done.output)
        assert "'abcd' matches 2 sessions: " in done.stderr  # most recently active first
        assert f"{ALPHA} (alpha)" in done.stderr
        assert f"{BETA} (beta)" in done.stderr
    assert await listed_ids(daemon) == [ALPHA, BETA, GAMMA]


@pytest.mark.usefixtures("sessions")
async def test_a_start_too_short_exits_5(daemon: InProcessDaemon) -> None:
    done = await betcode(daemon, "sessions", "show", "ab")
    assert done.exit_code == 5
    assert "give at least 4 characters" in done.stderr


@pytest.mark.usefixtures("sessions")
@pytest.mark.parametrize("reference", [GAMMA, "ef01", "gamma"])
async def test_a_full_id_a_unique_start_or_a_name(daemon: InProcessDaemon, reference: str) -> None:
    shown = await betcode(daemon, "sessions", "show", reference, "--json")
    assert json.loads(shown.stdout)["id"] == GAMMA
    listed = await betcode(daemon, "subagent", "list", "--parent", reference)
    assert (listed.exit_code, listed.stdout) == (0, "No subagents.\n")
    renamed = await betcode(daemon, "sessions", "rename", reference, "gamma")
    assert renamed.stdout == f"{GAMMA} is now named 'gamma'\n"


async def test_worktrees_by_name_or_start_of_id(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    repo = workspace.repo
    assert (await betcode(daemon, "repo", "register", str(repo))).exit_code == 0
    for name in ("feature-one", "feature-two"):
        made = await betcode(daemon, "worktree", "create", name, "--repo", str(repo), "--json")
        assert made.exit_code == 0, made.output
    listed = json.loads((await betcode(daemon, "worktree", "list", "--json")).stdout)
    one = next(w for w in listed if w["name"] == "feature-one")
    for reference in ("feature-one", one["id"][:8]):
        got = await betcode(daemon, "worktree", "get", reference, "--json")
        assert json.loads(got.stdout)["id"] == one["id"], reference
    removed = await betcode(daemon, "worktree", "remove", one["id"][:6])
    assert removed.exit_code == 0, removed.output
    left = json.loads((await betcode(daemon, "worktree", "list", "--json")).stdout)
    assert [w["name"] for w in left] == ["feature-two"]


@pytest.mark.usefixtures("sessions")
async def test_shell_completion_offers_session_ids_and_names(daemon: InProcessDaemon) -> None:
    env = {
        **os.environ,
        "_BETCODE_COMPLETE": "bash_complete",
        "COMP_WORDS": f"betcode sessions show --socket {daemon.socket} ",
        "COMP_CWORD": "5",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "betcode.cli.main", env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    offered = out.decode().splitlines()
    assert {f"plain,{v}" for v in (ALPHA, BETA, GAMMA, "alpha", "beta", "gamma")} <= set(offered)
