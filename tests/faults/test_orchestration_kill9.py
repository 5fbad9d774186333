"""kill -9 of the daemon in the middle of an orchestration, then a restart on the same data
dir: the plan goes on from its stored state and completes, every step run exactly once (a
completed step is not run again; the interrupted one resumes its own session)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import grpc
import pytest
from harness.conditions import until
from harness.daemon import Client, DaemonProcess, daemon_process_env
from harness.environment import Workspace

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.subagents.runner import CONTINUE_PROMPT
from betcode.v1 import agent_pb2, subagent_pb2, subagent_pb2_grpc

pytestmark = pytest.mark.real_cli

STEPS = {
    "first": 'SCN:plain {"text": "first-summary"} step-first-marker',
    "second": 'SCN:slow {"words": 300, "delay": 0.03} step-second-marker',
    "third": 'SCN:plain {"text": "third-summary"} step-third-marker',
}


@pytest.fixture
def daemon_process(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> Iterator[DaemonProcess]:
    root = tmp_path / "daemon"
    root.mkdir()
    daemon = DaemonProcess(
        root, daemon_process_env(root, claude_bin, workspace.env(mock_api.base_url))
    )
    yield daemon
    daemon.stop()


def fresh_starts(mock: MockAnthropic, marker: str) -> int:
    """Model calls that began a step: its prompt was sent and nothing was answered yet (a
    resumed step's call carries the earlier answer and the daemon's "continue" message)."""
    count = 0
    for request in mock.message_requests:
        messages = request.body["messages"]
        if any(m.get("role") == "assistant" for m in messages):
            continue
        if any(m.get("role") == "user" and marker in json.dumps(m) for m in messages):
            count += 1
    return count


async def test_a_plan_cut_by_kill9_completes_after_the_restart_with_each_step_run_once(
    daemon_process: DaemonProcess, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    await asyncio.to_thread(daemon_process.start)
    parent = Client(daemon_process.socket, "parent")
    parent.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await parent.wait_for("session_info")
    parent_id = parent.session_id
    await parent.close()
    channel = grpc.aio.insecure_channel(f"unix:{daemon_process.socket}")
    stub = subagent_pb2_grpc.SubagentServiceStub(channel)
    created = await stub.CreateOrchestration(
        subagent_pb2.CreateOrchestrationRequest(
            parent_session_id=parent_id,
            strategy=subagent_pb2.ORCHESTRATION_STRATEGY_SEQUENTIAL,
            steps=[subagent_pb2.OrchestrationStep(id=k, prompt=v) for k, v in STEPS.items()],
        )
    )
    # Kill while the second step streams (the first one has completed).
    await until(
        lambda: any(
            "step-second-marker" in json.dumps(r.body["messages"])
            for r in mock_api.message_requests
        ),
        60,
    )
    await channel.close()
    daemon_process.kill9()

    await asyncio.to_thread(daemon_process.start)
    channel = grpc.aio.insecure_channel(f"unix:{daemon_process.socket}")
    stub = subagent_pb2_grpc.SubagentServiceStub(channel)
    watch = subagent_pb2.WatchOrchestrationRequest(orchestration_id=created.orchestration_id)
    events = [event async for event in stub.WatchOrchestration(watch, timeout=120)]
    listed = await stub.ListSubagents(
        subagent_pb2.ListSubagentsRequest(parent_session_id=parent_id)
    )
    await channel.close()

    assert events[-1].WhichOneof("event") == "completed", events
    assert events[-1].completed.succeeded == 3
    assert sorted(s.step_id for s in listed.subagents) == ["first", "second", "third"]
    assert {s.status for s in listed.subagents} == {subagent_pb2.SUBAGENT_STATUS_COMPLETED}
    for marker in ("step-first-marker", "step-second-marker", "step-third-marker"):
        assert fresh_starts(mock_api, marker) == 1, marker
    # The second step's claude outlived the daemon under its holder: its turn was awaited to
    # its end, never interrupted by a "continue" message.
    assert not any(CONTINUE_PROMPT in json.dumps(r.body) for r in mock_api.message_requests)
    database = daemon_process.root / "data" / "daemon.db"
    with closing(sqlite3.connect(database)) as db:
        states = dict(
            db.execute(
                "SELECT step_key, status FROM orchestration_steps WHERE orchestration_id = ?",
                (created.orchestration_id,),
            ).fetchall()
        )
    assert states == {"first": "completed", "second": "completed", "third": "completed"}
