"""`betcode orchestrate` and `betcode subagent` against a real daemon (pinned real CLI, mock
model), through click's runner in a worker thread."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from harness.daemon import Client, InProcessDaemon
from harness.environment import Workspace

from betcode.cli.main import cli
from betcode.cli.subagent_cmd import worktree_cleanup_outcome
from betcode.v1 import agent_pb2, subagent_pb2

pytestmark = pytest.mark.real_cli


async def betcode(daemon: InProcessDaemon, *args: str) -> Result:
    command = [*args, "--socket", str(daemon.socket)]
    return await asyncio.to_thread(CliRunner().invoke, cli, command)


async def parent_id(clients: Callable[[str], Client], workspace: Workspace) -> str:
    parent = clients("parent")
    parent.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await parent.wait_for("session_info")
    return parent.session_id


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


async def test_orchestrate_runs_a_yaml_plan_and_prints_one_json_result(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    parent = await parent_id(clients, workspace)
    plan = write(
        tmp_path / "plan.yaml",
        f"""
parent_session_id: {parent}
strategy: dag
steps:
  - id: gather
    prompt: 'SCN:plain {{"text": "gathered-7"}} gather'
  - id: report
    prompt: 'SCN:plain {{"text": "reported-8"}} report'
    depends_on: [gather]
""",
    )
    result = await betcode(daemon, "orchestrate", str(plan), "--json")

    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["status"] == "completed"
    assert [(s["id"], s["status"], s["result_summary"]) for s in printed["steps"]] == [
        ("gather", "completed", "gathered-7"),
        ("report", "completed", "reported-8"),
    ]

    (workspace.repo / "notes.txt").write_text("x\n")
    failing = write(
        tmp_path / "failing.json",
        json.dumps(
            {
                "steps": [
                    {
                        "id": "read",
                        "prompt": 'SCN:tool_read {"file_path": "notes.txt"}',
                        "max_turns": 1,
                    },
                    {"id": "after", "prompt": "SCN:plain", "depends_on": ["read"]},
                ]
            }
        ),
    )
    watched = await betcode(daemon, "orchestrate", str(failing), "--parent", parent, "--watch")
    assert watched.exit_code == 1, watched.output
    assert "read                 failed" in watched.stdout
    assert "after                blocked" in watched.stdout
    assert watched.stdout.strip().endswith("failed")


@pytest.mark.parametrize(
    ("plan", "says"),
    [
        ('{"steps": [{"id": "a", "prompt": "x", "depends_on": ["a"]}]}', "cycle: a → a"),
        ('{"steps": [{"id": "a", "prompt": "x", "depends_on": ["zz"]}]}', "unknown steps"),
        ('{"steps": [{"id": "a", "prompt": "x", "colour": "red"}]}', "unknown fields ['colour']"),
        ('{"steps": [{"id": "a", "prompt": "x", "max_turns": "ten"}]}', "max_turns must be"),
        ("steps: [", "not valid JSON or YAML"),
    ],
)
async def test_an_invalid_plan_exits_5_and_starts_nothing(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    tmp_path: Path,
    plan: str,
    says: str,
) -> None:
    parent = await parent_id(clients, workspace)
    path = write(tmp_path / "plan.yaml", plan)
    result = await betcode(daemon, "orchestrate", str(path), "--parent", parent)

    assert result.exit_code == 5, result.output
    assert says in result.stderr
    listed = await betcode(daemon, "subagent", "list", "--json")
    assert json.loads(listed.stdout) == []


async def test_subagent_spawn_watch_and_list(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    parent = await parent_id(clients, workspace)
    spawned = await betcode(
        daemon,
        "subagent",
        "spawn",
        'SCN:plain {"text": "watched-9"}',
        "--parent",
        parent,
        "--name",
        "scout",
        "--json",
    )
    assert spawned.exit_code == 0, spawned.output
    subagent_id = json.loads(spawned.stdout)["subagent_id"]

    watched = await betcode(daemon, "subagent", "watch", subagent_id[:8])  # a start of its id
    assert watched.exit_code == 0, watched.output
    assert "[completed] watched-9" in watched.stdout
    listed = await betcode(daemon, "subagent", "list", "--parent", parent[:8])
    assert f"{subagent_id}  completed  scout" in listed.stdout
    sent = await betcode(daemon, "subagent", "send", "scout", "more?")  # its name
    assert sent.exit_code == 1
    assert "is not running" in sent.stderr


async def test_subagent_cancel_with_cleanup_worktree_says_what_became_of_its_worktree(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    parent = await parent_id(clients, workspace)
    spawned = await betcode(
        daemon,
        "subagent",
        "spawn",
        'SCN:slow {"words": 400, "delay": 0.05} working',
        "--parent",
        parent,
        "--json",
    )
    assert spawned.exit_code == 0, spawned.output
    subagent_id = json.loads(spawned.stdout)["subagent_id"]
    cancelled = await betcode(daemon, "subagent", "cancel", subagent_id, "--cleanup-worktree")
    assert cancelled.exit_code == 0, cancelled.output
    assert f"{subagent_id} cancelled after" in cancelled.stdout
    assert "worktree not removed: the daemon made no worktree for this subagent" in (
        cancelled.stdout
    )


@pytest.mark.parametrize(
    ("removed", "kept_reason", "said"),
    [
        (True, "", "worktree removed"),
        (False, "would lose 1 untracked file (a.txt)", "worktree not removed: would lose 1"),
        (False, "", "worktree not removed: no reason given"),
    ],
)
def test_the_worktree_cleanup_outcome_in_words(removed: bool, kept_reason: str, said: str) -> None:
    response = subagent_pb2.CancelSubagentResponse(
        cancelled=True, worktree_removed=removed, worktree_kept_reason=kept_reason
    )
    assert worktree_cleanup_outcome(response).startswith(said)
