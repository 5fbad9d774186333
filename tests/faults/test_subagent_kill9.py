"""kill -9 of the daemon while a subagent's question waits in its parent's inbox, then a restart
on the same data dir. A step of an orchestration is re-attached: its question stays pending
and the parent's client answers it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import grpc
import pytest
from harness.daemon import Client, DaemonProcess, Decision
from harness.fake_claude import FakeClaude
from harness.restarts import Restarts

from betcode.v1 import agent_pb2, subagent_pb2, subagent_pb2_grpc

ASKS_THEN_ANSWERS = {
    "turns": [
        [
            {"do": "permission", "tool_name": "Bash", "input": {"command": "make deploy"}},
            {"do": "text", "text": "deployed"},
        ]
    ]
}
ANSWERER = (("x-client-id", "answerer"),)


async def started(restarts: Restarts, tmp_path: Path) -> tuple[FakeClaude, DaemonProcess, Client]:
    """The daemon on a fake claude that asks before it answers, and a parent session's client."""
    fake = FakeClaude(tmp_path)
    daemon, parent = await restarts.start_fake_session(fake.binary([ASKS_THEN_ANSWERS]))
    return fake, daemon, parent


async def kill9_and_restart(daemon: DaemonProcess, *, holders_too: bool) -> None:
    await asyncio.to_thread(lambda: daemon.kill9(holders_too=holders_too))
    await asyncio.to_thread(daemon.start)


def subagents_of(client: Client) -> subagent_pb2_grpc.SubagentServiceStub:
    return subagent_pb2_grpc.SubagentServiceStub(client.channel)


def claude_pids(fake: FakeClaude) -> list[int]:
    return [json.loads(line)["pid"] for line in fake.log.read_text().splitlines()]


def audit(restarts: Restarts, event_type: str) -> list[dict[str, Any]]:
    with closing(sqlite3.connect(restarts.database)) as db:
        db.row_factory = sqlite3.Row
        query = "SELECT * FROM audit_log WHERE event_type = ? ORDER BY id"
        return [dict(row) for row in db.execute(query, (event_type,))]


def answer(session_id: str, request_id: str) -> agent_pb2.AnswerPermissionRequest:
    return agent_pb2.AnswerPermissionRequest(
        session_id=session_id,
        request_id=request_id,
        decision=Decision.PERMISSION_DECISION_ALLOW_ONCE,
    )


async def test_an_orchestration_steps_question_stays_pending_across_kill9_and_the_parent_answers_it(
    restarts: Restarts, tmp_path: Path
) -> None:
    fake, daemon, parent = await started(restarts, tmp_path)
    created = await subagents_of(parent).CreateOrchestration(
        subagent_pb2.CreateOrchestrationRequest(
            parent_session_id=parent.session_id,
            strategy=subagent_pb2.ORCHESTRATION_STRATEGY_SEQUENTIAL,
            steps=[subagent_pb2.OrchestrationStep(id="deploy", prompt="deploy it")],
        )
    )
    asked = (await parent.wait_for("permission_request")).permission_request
    parent_id = parent.session_id

    await kill9_and_restart(daemon, holders_too=False)

    other = restarts.client("other")  # in a session of its own
    other.converse(agent_pb2.StartConversation(working_directory=str(tmp_path / "repo")))
    await other.wait_for("session_info")
    agents = other.stub
    listed = await agents.ListPendingPermissions(
        agent_pb2.ListPendingPermissionsRequest(session_id=parent_id)
    )
    [pending] = listed.pending
    assert pending.request_id == asked.request_id  # re-attached with its step: still asking
    # Another session's id does not answer it: no answering others' questions by their ids.
    with pytest.raises(grpc.aio.AioRpcError) as unrelated:
        await agents.AnswerPermission(answer(other.session_id, asked.request_id))
    assert unrelated.value.code() == grpc.StatusCode.NOT_FOUND
    # The parent's id, which its client watches the question under, does.
    answered = await agents.AnswerPermission(answer(parent_id, asked.request_id), metadata=ANSWERER)
    again = await agents.AnswerPermission(answer(parent_id, asked.request_id))

    assert (answered.accepted, answered.duplicate, answered.outcome) == (True, False, "allowed")
    assert (again.accepted, again.duplicate, again.outcome) == (True, True, "allowed")
    watch = subagent_pb2.WatchOrchestrationRequest(orchestration_id=created.orchestration_id)
    events = [event async for event in subagents_of(other).WatchOrchestration(watch, timeout=60)]
    assert events[-1].WhichOneof("event") == "completed", events
    # Audited once, under the subagent's session, by the client that answered.
    [granted] = [
        row
        for row in audit(restarts, "permission_grant")
        if json.loads(row["context"])["request_id"] == asked.request_id
    ]
    assert (granted["session_id"], granted["actor_id"]) == (pending.session_id, "answerer")
    assert len(claude_pids(fake)) == 1  # the step's claude answered, never started again
