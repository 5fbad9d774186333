"""kill -9 of the daemon while a subagent's question waits in its parent's inbox, then a restart
on the same data dir. A subagent spawned on its own does not survive it (reconciliation fails
the run): its question is withdrawn before the daemon serves — shown resolved in both sessions'
logs, audited, refused to a late answer — and its claude, if it outlived the daemon under its
holder, is stopped. A step of an orchestration is re-attached instead: its question stays
pending and the parent's client answers it."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import grpc
import pytest
from harness.conditions import until
from harness.daemon import Client, DaemonProcess, Decision
from harness.fake_claude import FakeClaude
from harness.restarts import Restarts, gone

from betcode.v1 import agent_pb2, common_pb2, subagent_pb2, subagent_pb2_grpc

ASKS_THEN_ANSWERS = {
    "turns": [
        [
            {"do": "permission", "tool_name": "Bash", "input": {"command": "make deploy"}},
            {"do": "text", "text": "deployed"},
        ]
    ]
}
WHY = "subagent failed: daemon restarted"
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


async def replay(restarts: Restarts, session_id: str) -> Client:
    """A client replaying the session after the restart, once it was shown a resolution
    (then following it live)."""
    observer = restarts.client(f"observer-{session_id[:8]}")
    observer.resume(session_id, 0)
    await observer.wait_for("permission_resolved")
    return observer


def resolution(observer: Client, request_id: str) -> agent_pb2.PermissionResolved:
    [resolved] = [
        event.permission_resolved
        for event in observer.of_kind("permission_resolved")
        if event.permission_resolved.request_id == request_id
    ]
    return resolved


def last_status(observer: Client) -> int:
    return observer.of_kind("status_change")[-1].status_change.status


def answer(session_id: str, request_id: str) -> agent_pb2.AnswerPermissionRequest:
    return agent_pb2.AnswerPermissionRequest(
        session_id=session_id,
        request_id=request_id,
        decision=Decision.PERMISSION_DECISION_ALLOW_ONCE,
    )


# holders_too: claude dies with the daemon; otherwise it outlives it under its holder and the
# restarted daemon re-attaches its session.
@pytest.mark.parametrize("holders_too", [True, False], ids=["claude-died", "claude-held"])
async def test_a_standalone_subagents_question_is_withdrawn_by_the_restart_that_fails_its_run(
    restarts: Restarts, tmp_path: Path, holders_too: bool
) -> None:
    fake, daemon, parent = await started(restarts, tmp_path)
    spawned = await subagents_of(parent).SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id, prompt="deploy it", name="deployer"
        )
    )
    asked = (await parent.wait_for("permission_request")).permission_request
    parent_id = parent.session_id
    [claude_pid] = claude_pids(fake)

    await kill9_and_restart(daemon, holders_too=holders_too)

    after = restarts.client("after")
    agents = after.stub
    for listed_session in ("", parent_id, spawned.session_id):
        listed = await agents.ListPendingPermissions(
            agent_pb2.ListPendingPermissionsRequest(session_id=listed_session)
        )
        assert list(listed.pending) == [], listed_session
    # A client replaying either session after the restart sees the question settled, and the
    # subagent's turn ended (not waiting for the user).
    observers = [
        await replay(restarts, session_id) for session_id in (parent_id, spawned.session_id)
    ]
    for observer in observers:
        resolved = resolution(observer, asked.request_id)
        assert (resolved.outcome, resolved.message) == ("cancelled", WHY), observer.client_id
    await until(lambda: last_status(observers[1]) == common_pb2.AGENT_STATUS_IDLE)
    [denied] = [
        row
        for row in audit(restarts, "permission_deny")
        if json.loads(row["context"])["request_id"] == asked.request_id
    ]
    assert (denied["actor_type"], denied["actor_id"]) == ("daemon", "subagent-manager")
    assert (denied["subagent_id"], denied["session_id"]) == (
        spawned.subagent_id,
        spawned.session_id,
    )
    assert json.loads(denied["context"])["reason"] == WHY
    # A late answer, naming either session or none, is refused and starts nothing.
    for named in ("", parent_id, spawned.session_id):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await agents.AnswerPermission(answer(named, asked.request_id))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, named
        assert refused.value.details() == (
            f"permission request {asked.request_id!r} was withdrawn: {WHY}"
        )
    # A claude that outlived the daemon does not go on unsupervised: the run is over.
    await until(lambda: gone(claude_pid))
    assert claude_pids(fake) == [claude_pid]  # nothing started it again
    listed_runs = await subagents_of(after).ListSubagents(
        subagent_pb2.ListSubagentsRequest(parent_session_id=parent_id)
    )
    assert [run.status for run in listed_runs.subagents] == [subagent_pb2.SUBAGENT_STATUS_FAILED]


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


def a_request_committed(database: Path) -> bool:
    with closing(sqlite3.connect(database)) as db:
        row = db.execute(
            "SELECT 1 FROM messages WHERE direction = 'out' AND message_type = 'control_request'"
        ).fetchone()
    return row is not None


# The step's claude outlives the daemon under its holder, its request committed but not decided.
@pytest.mark.parametrize("auto_approve", [False, True], ids=["asked", "auto-approved"])
async def test_a_steps_request_a_killed_daemon_left_undecided_goes_through_its_delegation(
    restarts: Restarts, tmp_path: Path, auto_approve: bool
) -> None:
    fake, daemon, parent = await started(restarts, tmp_path)
    # The rules are read on the step's first request: from a FIFO nobody writes, reading them
    # holds the daemon after claude's request is committed and before anything decided it.
    rules = tmp_path / "repo" / ".claude" / "settings.local.json"
    rules.parent.mkdir()
    os.mkfifo(rules)
    step = subagent_pb2.OrchestrationStep(
        id="deploy", prompt="deploy it", auto_approve=auto_approve, allowed_tools=["Bash"]
    )
    created = await subagents_of(parent).CreateOrchestration(
        subagent_pb2.CreateOrchestrationRequest(
            parent_session_id=parent.session_id,
            strategy=subagent_pb2.ORCHESTRATION_STRATEGY_SEQUENTIAL,
            steps=[step],
        )
    )
    await until(lambda: a_request_committed(restarts.database))
    parent_id = parent.session_id

    await asyncio.to_thread(daemon.kill9)
    rules.unlink()  # no rule decides it: the step's delegation does, or the parent's client
    await asyncio.to_thread(daemon.start)

    other = restarts.client("other")
    other.converse(agent_pb2.StartConversation(working_directory=str(tmp_path / "repo")))
    await other.wait_for("session_info")
    watch = subagent_pb2.WatchOrchestrationRequest(orchestration_id=created.orchestration_id)
    if not auto_approve:
        listing = agent_pb2.ListPendingPermissionsRequest(session_id=parent_id)
        listed = await other.stub.ListPendingPermissions(listing)
        async with asyncio.timeout(20):
            while not listed.pending:
                await asyncio.sleep(0.05)
                listed = await other.stub.ListPendingPermissions(listing)
        [pending] = listed.pending
        assert pending.description.startswith("subagent deploy (step deploy) asks")
        await other.stub.AnswerPermission(answer(parent_id, pending.request_id))
    events = [event async for event in subagents_of(other).WatchOrchestration(watch, timeout=60)]

    assert events[-1].WhichOneof("event") == "completed", events
    approved = audit(restarts, "auto_approve_tool_call")
    assert len(approved) == (1 if auto_approve else 0)
    assert len(claude_pids(fake)) == 1  # the step's claude answered, never started again
