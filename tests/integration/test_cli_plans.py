"""Plans you can come back to, against a real daemon (pinned real CLI, mock model): each step
says where it ran (session, directory or worktree and branch), `orchestrate list` and
`orchestrate watch PLAN` find a plan again, and Ctrl-C while watching says the plan goes on."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from harness.cli_process import betcode, finish, spawn
from harness.daemon import Client, InProcessDaemon
from harness.environment import Workspace
from test_cli_run import stderr_until
from test_cli_subagents import parent_id

from betcode.cli.ids import short_id

pytestmark = pytest.mark.real_cli

STARTED = re.compile(r"^plan (\S+) started")
SLOW_PROMPT = 'SCN:slow {"words": 60, "delay": 0.05} working'  # a step of about 3 s


async def first_step_running(socket: Path, repo: Path) -> None:
    """Until a subagent runs (the plan's first step)."""
    for _ in range(300):
        listed = await betcode(socket, repo, "subagent", "list", "--status", "running", "--json")
        if json.loads(listed.out):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("no step started in 30 s")


def write_plan(path: Path, steps: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"steps": steps}))
    return path


async def test_steps_say_where_they_ran_and_the_plan_is_listed_and_watched_again(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    socket, repo = daemon.socket, workspace.repo
    parent = await parent_id(clients, workspace)
    assert (await betcode(socket, repo, "repo", "register", str(repo))).code == 0
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"id": "here", "prompt": 'SCN:plain {"text": "done here"}'},
            {"id": "apart", "prompt": 'SCN:plain {"text": "done apart"}', "worktree": True},
        ],
    )
    ran = await betcode(socket, repo, "orchestrate", str(plan), "--parent", parent[:8], "--json")
    assert ran.code == 0, ran.err
    result = json.loads(ran.out)
    steps = {step["id"]: step for step in result["steps"]}
    assert steps["here"]["working_directory"] == str(repo)
    assert steps["here"]["worktree"] == ""
    assert steps["apart"]["worktree"]
    assert steps["apart"]["branch"]
    assert all(step["session_id"] for step in steps.values())
    plan_id = result["orchestration_id"]

    listed = await betcode(socket, repo, "orchestrate", "list")
    header, row = listed.out.splitlines()
    assert header.split()[:3] == ["ID", "STATUS", "DONE"]
    assert row.startswith(f"{short_id(plan_id)}  completed  2/2")
    as_json = json.loads((await betcode(socket, repo, "orchestrate", "list", "--json")).out)
    assert [p["orchestration_id"] for p in as_json] == [plan_id]

    again = await betcode(socket, repo, "orchestrate", "watch", short_id(plan_id))
    assert again.code == 0, again.err
    assert f"session {steps['here']['session_id'][:8]}, in {repo}" in again.out
    assert f"worktree {steps['apart']['worktree']} (branch {steps['apart']['branch']})" in (
        again.out
    )
    assert again.out.strip().endswith(f"orchestration {plan_id} completed")

    unknown = await betcode(socket, repo, "orchestrate", "watch", "0bad0bad")
    assert unknown.code == 6
    assert "no plan '0bad0bad' in the daemon; `betcode orchestrate list` shows them" in (
        unknown.err
    )


async def test_ctrl_c_while_watching_leaves_the_plan_running_and_says_how_to_watch_again(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    socket, repo = daemon.socket, workspace.repo
    parent = await parent_id(clients, workspace)
    plan = write_plan(tmp_path / "slow.json", [{"id": "slow", "prompt": SLOW_PROMPT}])
    watching = await spawn(socket, repo, "orchestrate", str(plan), "--parent", parent, "--watch")
    plan_id = await stderr_until(watching, STARTED)
    watching.send_signal(signal.SIGINT)
    stopped = await finish(watching)
    assert stopped.code == 1
    assert "Aborted!" not in stopped.err
    assert (
        f"Stopped watching. Plan {plan_id} goes on in the daemon; watch it again with "
        f"`betcode orchestrate watch {short_id(plan_id)}`." in stopped.err
    )

    again = await betcode(socket, repo, "orchestrate", "watch", short_id(plan_id))
    assert again.code == 0, again.err
    assert again.out.strip().endswith(f"orchestration {plan_id} completed")


async def test_a_plan_without_a_parent_gets_a_session_named_after_it(
    daemon: InProcessDaemon, workspace: Workspace, tmp_path: Path
) -> None:
    socket, repo = daemon.socket, workspace.repo
    plan = write_plan(tmp_path / "solo.json", [{"id": "one", "prompt": "SCN:plain"}])
    ran = await betcode(socket, repo, "orchestrate", str(plan), "--json")
    assert ran.code == 0, ran.err
    [listed] = json.loads((await betcode(socket, repo, "orchestrate", "list", "--json")).out)
    sessions = json.loads((await betcode(socket, repo, "sessions", "list", "--json")).out)
    names = {s["id"]: s["name"] for s in sessions}
    assert names[listed["parent_session_id"]] == "plan solo.json"


async def test_cancel_stops_a_plan_and_retry_runs_what_is_left(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    socket, repo = daemon.socket, workspace.repo
    parent = await parent_id(clients, workspace)
    plan = write_plan(
        tmp_path / "two.json",
        [
            {"id": "first", "prompt": SLOW_PROMPT},
            {
                "id": "second",
                "prompt": 'SCN:plain {"text": "second done"}',
                "depends_on": ["first"],
            },
        ],
    )
    running = await spawn(socket, repo, "orchestrate", str(plan), "--parent", parent, "--json")
    plan_id = await stderr_until(running, STARTED)
    await first_step_running(socket, repo)
    cancelled = await betcode(socket, repo, "orchestrate", "cancel", short_id(plan_id))
    assert cancelled.code == 0, cancelled.err
    assert cancelled.out.startswith(f"plan {plan_id} cancelled")
    ended = await finish(running)
    assert ended.code == 1
    result = json.loads(ended.out)
    assert result["status"] == "failed"
    assert [(s["id"], s["status"]) for s in result["steps"]] == [
        ("first", "failed"),
        ("second", "blocked"),
    ]
    again = await betcode(socket, repo, "orchestrate", "cancel", short_id(plan_id))
    assert again.out == f"plan {plan_id} had already ended\n"

    not_failed = await betcode(socket, repo, "orchestrate", "retry", short_id(plan_id), "second")
    assert not_failed.code == 5
    assert "only failed steps can be retried; not failed: second (failed: first)" in (
        not_failed.err
    )
    retried = await betcode(socket, repo, "orchestrate", "retry", short_id(plan_id), "--json")
    assert retried.code == 0, retried.err
    after = json.loads(retried.out)
    assert after["status"] == "completed"
    assert [(s["id"], s["status"]) for s in after["steps"]] == [
        ("first", "completed"),
        ("second", "completed"),
    ]
    assert "second done" in after["steps"][1]["result_summary"]
    listed = json.loads((await betcode(socket, repo, "orchestrate", "list", "--json")).out)
    assert [(p["orchestration_id"], p["status"]) for p in listed] == [(plan_id, "completed")]
