"""Real CLI through the daemon: a subagent's questions in its parent's inbox, auto-approve
limits, revoke and cancel (SAG-10..16)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from harness.conditions import until
from harness.daemon import Client, Decision, InProcessDaemon
from harness.environment import Workspace
from harness.git_repos import make_repository, sh

from betcode.claude.supervisor import SupervisorState
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.subagents import limits
from betcode.v1 import agent_pb2, agent_pb2_grpc, subagent_pb2, subagent_pb2_grpc
from betcode.worktrees import RepoChanges

pytestmark = pytest.mark.real_cli


@pytest.fixture
async def channel(daemon: InProcessDaemon) -> AsyncIterator[grpc.aio.Channel]:
    channel = grpc.aio.insecure_channel(f"unix:{daemon.socket}")
    yield channel
    await channel.close()


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> subagent_pb2_grpc.SubagentServiceStub:
    return subagent_pb2_grpc.SubagentServiceStub(channel)


async def parent_session(clients: Callable[[str], Client], workspace: Workspace) -> Client:
    parent = clients("parent")
    parent.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await parent.wait_for("session_info")
    return parent


def bash_steps(*commands: str) -> str:
    return f"SCN:bash_steps {json.dumps({'commands': list(commands)})} run them"


async def a_subagent_asking(
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
) -> tuple[Client, subagent_pb2.SpawnSubagentResponse, agent_pb2.PermissionRequest]:
    """A parent session and its subagent "helper", whose Bash call waits in the parent's inbox:
    the parent's client, the spawn's answer and the question as the parent saw it."""
    parent = await parent_session(clients, workspace)
    spawned = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id,
            prompt=bash_steps('python3 -c "print(6 * 7)"'),
            name="helper",
        )
    )
    asked = (await parent.wait_for("permission_request")).permission_request
    return parent, spawned, asked


async def finished(
    stub: subagent_pb2_grpc.SubagentServiceStub, subagent_id: str
) -> list[subagent_pb2.SubagentEvent]:
    request = subagent_pb2.WatchSubagentRequest(subagent_id=subagent_id)
    return [event async for event in stub.WatchSubagent(request, timeout=90)]


async def audited(daemon: InProcessDaemon, event_type: str) -> list[dict[str, Any]]:
    """The rows of ``event_type`` once there is one: the audit log is written after the event
    a client sees (the recorder queues it on the writer), so a read right then may be early."""
    await until(lambda: bool(audit(daemon, event_type)))
    return audit(daemon, event_type)


def audit(daemon: InProcessDaemon, event_type: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(daemon.config.data_dir / "daemon.db")
    conn.row_factory = sqlite3.Row
    try:
        query = "SELECT * FROM audit_log WHERE event_type = ? ORDER BY id"
        return [dict(row) for row in conn.execute(query, (event_type,))]
    finally:
        conn.close()


async def test_a_subagents_question_waits_in_the_parents_inbox_and_the_parent_answers_it(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    channel: grpc.aio.Channel,
) -> None:
    parent, spawned, asked = await a_subagent_asking(clients, workspace, stub)
    assert asked.tool_name == "Bash"
    assert asked.description.startswith("subagent helper asks")
    # The same request, once, in `betcode permissions pending`'s list, for the subagent's session.
    agents = agent_pb2_grpc.AgentServiceStub(channel)
    pending = (
        await agents.ListPendingPermissions(agent_pb2.ListPendingPermissionsRequest())
    ).pending
    assert [(p.request_id, p.session_id) for p in pending] == [
        (asked.request_id, spawned.session_id)
    ]
    # And in the parent session's own list: its clients answer it (one inbox).
    of_parent = await agents.ListPendingPermissions(
        agent_pb2.ListPendingPermissionsRequest(session_id=parent.session_id)
    )
    assert list(of_parent.pending) == list(pending)

    parent.answer(asked.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    events = await finished(stub, spawned.subagent_id)

    assert events[-1].WhichOneof("event") == "completed"
    assert "ok: 42" in events[-1].completed.result_summary
    resolved = await parent.wait_for("permission_resolved")
    assert resolved.permission_resolved.request_id == asked.request_id
    assert resolved.permission_resolved.outcome == "allowed"
    # Answered once: a second answer from anywhere is a duplicate that changes nothing.
    again = await agents.AnswerPermission(
        agent_pb2.AnswerPermissionRequest(
            request_id=asked.request_id, decision=Decision.PERMISSION_DECISION_DENY
        )
    )
    assert again.duplicate


async def test_auto_approve_runs_calls_within_the_rate_limit_then_denies_and_audits_each(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
) -> None:
    """Without queue_on_rate_limit, a call over the limit is denied at once."""
    parent = await parent_session(clients, workspace)
    commands = [f"python3 -c \"print('call-{n}')\"" for n in range(1, 7)]
    spawned = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id,
            prompt=bash_steps(*commands),
            allowed_tools=["Bash(python3:*)"],
            auto_approve=True,
            auto_approve_config=subagent_pb2.AutoApproveConfig(bash_commands_per_minute=5),
        )
    )
    events = await finished(stub, spawned.subagent_id)

    # The mock model quotes the last tool result it got: the sixth call's refusal.
    summary = events[-1].completed.result_summary
    assert "error: BetCode denied this call: auto-approve rate limit" in summary
    approved = audit(daemon, "auto_approve_tool_call")
    ours = [row for row in approved if row["subagent_id"] == spawned.subagent_id]
    assert len(ours) == 5
    assert {row["parent_session_id"] for row in ours} == {parent.session_id}
    [limited] = await audited(daemon, "rate_limit_exceeded")
    assert json.loads(limited["context"])["limit"] == "bash_commands_per_minute"
    assert parent.of_kind("permission_request") == []


async def test_revoke_lets_the_call_in_flight_finish_and_the_next_call_asks_the_parent(
    daemon: InProcessDaemon,
    mock_api: MockAnthropic,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
) -> None:
    parent = await parent_session(clients, workspace)
    marker = workspace.repo / "started"
    spawned = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id,
            prompt=bash_steps(
                f"python3 -c \"import pathlib, time; pathlib.Path('{marker}').touch(); "
                "time.sleep(3); print('first-done')\"",
                "python3 -c \"print('second')\"",
            ),
            allowed_tools=["Bash"],
            auto_approve=True,
        )
    )
    await until(marker.exists, 60)

    revoked = await stub.RevokeAutoApprove(
        subagent_pb2.RevokeAutoApproveRequest(
            subagent_id=spawned.subagent_id, reason="the user wants to see every call now"
        )
    )
    assert revoked.revoked
    assert revoked.pending_tool_calls == 1
    assert revoked.subagent_status == "running"
    asked = (await parent.wait_for("permission_request")).permission_request
    command = asked.input["command"]
    assert isinstance(command, str), command
    assert "print('second')" in command
    parent.answer(asked.request_id, Decision.PERMISSION_DECISION_DENY, "not now")
    events = await finished(stub, spawned.subagent_id)

    # The call in flight ran to its end; the next one was the parent's to answer.
    assert any("first-done" in json.dumps(r.body["messages"]) for r in mock_api.message_requests)
    assert "error: not now" in events[-1].completed.result_summary
    [row] = await audited(daemon, "permission_revoke")
    assert row["subagent_id"] == spawned.subagent_id
    again = await stub.RevokeAutoApprove(
        subagent_pb2.RevokeAutoApproveRequest(
            subagent_id=spawned.subagent_id, reason="once more, after it finished"
        )
    )
    assert not again.revoked
    assert again.subagent_status == "completed"


async def test_cancel_stops_a_running_subagent_and_reports_its_counters(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
) -> None:
    parent = await parent_session(clients, workspace)
    spawned = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id,
            prompt='SCN:slow {"words": 400, "delay": 0.05} go on',
        )
    )
    watch = stub.WatchSubagent(
        subagent_pb2.WatchSubagentRequest(subagent_id=spawned.subagent_id), timeout=60
    )
    seen: list[subagent_pb2.SubagentEvent] = []

    async def collect() -> None:
        async for event in watch:
            seen.append(event)

    collecting = asyncio.create_task(collect())
    await until(lambda: any(e.HasField("output") and e.output.text for e in seen), 60)

    response = await stub.CancelSubagent(
        subagent_pb2.CancelSubagentRequest(
            subagent_id=spawned.subagent_id, reason="enough", cleanup_worktree=True
        )
    )
    await asyncio.wait_for(collecting, 30)

    assert response.cancelled
    assert response.final_status == "cancelled"
    assert response.tool_calls_executed == 0
    # It ran in the parent's directory, not in a worktree made for it: that stays.
    assert not response.worktree_removed
    assert response.worktree_kept_reason == "the daemon made no worktree for this subagent"
    assert (workspace.repo / ".git").exists()
    assert seen[-1].WhichOneof("event") == "cancelled"
    assert daemon.daemon.sessions is not None
    session = await daemon.daemon.sessions.get(spawned.session_id)
    assert session.supervisor.state is SupervisorState.IDLE
    [row] = await audited(daemon, "subagent_cancel")
    assert row["subagent_id"] == spawned.subagent_id
    late = await stub.CancelSubagent(
        subagent_pb2.CancelSubagentRequest(subagent_id=spawned.subagent_id)
    )
    assert not late.cancelled
    assert late.final_status == "cancelled"


async def test_cancel_withdraws_the_subagents_unanswered_question_without_starting_it_again(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    channel: grpc.aio.Channel,
) -> None:
    parent, spawned, asked = await a_subagent_asking(clients, workspace, stub)

    response = await stub.CancelSubagent(
        subagent_pb2.CancelSubagentRequest(
            subagent_id=spawned.subagent_id, reason="not needed any more"
        )
    )

    assert response.cancelled
    agents = agent_pb2_grpc.AgentServiceStub(channel)
    listed = await agents.ListPendingPermissions(agent_pb2.ListPendingPermissionsRequest())
    assert list(listed.pending) == []
    resolved = (await parent.wait_for("permission_resolved")).permission_resolved
    assert (resolved.request_id, resolved.outcome) == (asked.request_id, "cancelled")
    assert resolved.message == "subagent cancelled: not needed any more"
    [denied] = await audited(daemon, "permission_deny")
    assert (denied["subagent_id"], denied["parent_session_id"]) == (
        spawned.subagent_id,
        parent.session_id,
    )
    assert (denied["session_id"], denied["tool_name"]) == (spawned.session_id, "Bash")
    assert json.loads(denied["context"]) == {
        "request_id": asked.request_id,
        "decision": "cancelled",
        "reason": "subagent cancelled: not needed any more",
    }
    [cancel] = await audited(daemon, "subagent_cancel")
    assert json.loads(cancel["context"])["permission_requests_withdrawn"] == "1"
    # A late answer is refused: nothing reaches claude, so nothing starts it again.
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await agents.AnswerPermission(
            agent_pb2.AnswerPermissionRequest(
                request_id=asked.request_id, decision=Decision.PERMISSION_DECISION_ALLOW_ONCE
            )
        )
    assert late.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dict(late.value.trailing_metadata())["betcode-error-code"] == "PERMISSION_WITHDRAWN"
    assert late.value.details() == (
        f"permission request {asked.request_id!r} was withdrawn: "
        "subagent cancelled: not needed any more"
    )
    assert stored_lines(daemon, spawned.session_id, "control_response") == []
    assert len(stored_lines(daemon, spawned.session_id, "user")) == 1  # the prompt only
    assert daemon.daemon.sessions is not None
    session = await daemon.daemon.sessions.get(spawned.session_id)
    assert (session.supervisor.state, session.supervisor.pid) == (SupervisorState.IDLE, None)


def in_the_cancels_window(
    daemon: InProcessDaemon, monkeypatch: pytest.MonkeyPatch, act: Callable[[], Awaitable[None]]
) -> None:
    """Runs `act` where a cancel has stopped the subagent's claude and not yet settled its
    questions (right before the bridge withdraws them)."""
    bridge = daemon.daemon.bridge
    assert bridge is not None
    withdraw_all = bridge.withdraw_all

    async def act_first(*args: Any) -> list[Any]:
        await act()
        return await withdraw_all(*args)

    monkeypatch.setattr(bridge, "withdraw_all", act_first)


async def test_an_answer_racing_a_cancel_is_refused_and_the_cancel_alone_settles_the_question(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    channel: grpc.aio.Channel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent, spawned, asked = await a_subagent_asking(clients, workspace, stub)
    agents = agent_pb2_grpc.AgentServiceStub(channel)
    raced: list[agent_pb2.AnswerPermissionResponse | grpc.aio.AioRpcError] = []

    async def answer() -> None:
        try:
            raced.append(
                await agents.AnswerPermission(
                    agent_pb2.AnswerPermissionRequest(
                        request_id=asked.request_id,
                        decision=Decision.PERMISSION_DECISION_ALLOW_ONCE,
                    )
                )
            )
        except grpc.aio.AioRpcError as refused:
            raced.append(refused)

    in_the_cancels_window(daemon, monkeypatch, answer)
    response = await stub.CancelSubagent(
        subagent_pb2.CancelSubagentRequest(
            subagent_id=spawned.subagent_id, reason="not needed any more"
        )
    )

    assert response.cancelled
    [refused] = raced
    assert isinstance(refused, grpc.aio.AioRpcError), refused
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dict(refused.trailing_metadata())["betcode-error-code"] == "PERMISSION_WITHDRAWN"
    assert refused.details() == (
        f"permission request {asked.request_id!r} was withdrawn: "
        "subagent cancelled: not needed any more"
    )
    # One outcome, recorded once: the cancel's.
    [decided] = [
        row
        for row in audit(daemon, "permission_grant") + await audited(daemon, "permission_deny")
        if json.loads(row["context"])["request_id"] == asked.request_id
    ]
    assert json.loads(decided["context"])["decision"] == "cancelled"
    [cancel] = await audited(daemon, "subagent_cancel")
    assert json.loads(cancel["context"])["permission_requests_withdrawn"] == "1"
    resolved = (await parent.wait_for("permission_resolved")).permission_resolved
    assert (resolved.request_id, resolved.outcome) == (asked.request_id, "cancelled")
    # Nothing reached claude, and nothing started it again.
    assert stored_lines(daemon, spawned.session_id, "control_response") == []
    assert len(stored_lines(daemon, spawned.session_id, "user")) == 1  # the prompt only
    assert daemon.daemon.sessions is not None
    session = await daemon.daemon.sessions.get(spawned.session_id)
    assert (session.supervisor.state, session.supervisor.pid) == (SupervisorState.IDLE, None)


async def test_a_message_racing_a_cancel_is_not_delivered_and_starts_nothing(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, spawned, _ = await a_subagent_asking(clients, workspace, stub)
    sent: list[subagent_pb2.SendToSubagentResponse] = []

    async def send() -> None:
        sent.append(
            await stub.SendToSubagent(
                subagent_pb2.SendToSubagentRequest(
                    subagent_id=spawned.subagent_id, content="one more thing"
                )
            )
        )

    in_the_cancels_window(daemon, monkeypatch, send)
    await stub.CancelSubagent(subagent_pb2.CancelSubagentRequest(subagent_id=spawned.subagent_id))

    assert [response.delivered for response in sent] == [False]
    assert len(stored_lines(daemon, spawned.session_id, "user")) == 1  # the prompt only
    assert daemon.daemon.sessions is not None
    session = await daemon.daemon.sessions.get(spawned.session_id)
    assert (session.supervisor.state, session.supervisor.pid) == (SupervisorState.IDLE, None)


async def test_a_subagent_that_fails_withdraws_its_unanswered_question_and_never_starts_again(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    channel: grpc.aio.Channel,
) -> None:
    parent, spawned, asked = await a_subagent_asking(clients, workspace, stub)
    assert daemon.daemon.sessions is not None
    session = await daemon.daemon.sessions.get(spawned.session_id)
    pid = session.supervisor.pid
    assert pid is not None

    os.kill(pid, signal.SIGKILL)  # claude dies waiting for the answer
    events = await finished(stub, spawned.subagent_id)

    assert events[-1].WhichOneof("event") == "failed"
    why = f"subagent failed: {events[-1].failed.error_message}"
    resolved = (await parent.wait_for("permission_resolved")).permission_resolved
    assert (resolved.request_id, resolved.outcome, resolved.message) == (
        asked.request_id,
        "cancelled",
        why,
    )
    agents = agent_pb2_grpc.AgentServiceStub(channel)
    listed = await agents.ListPendingPermissions(agent_pb2.ListPendingPermissionsRequest())
    assert list(listed.pending) == []
    [denied] = [
        row
        for row in await audited(daemon, "permission_deny")
        if json.loads(row["context"])["request_id"] == asked.request_id
    ]
    assert (denied["actor_type"], denied["actor_id"]) == ("daemon", "subagent-manager")
    assert (denied["subagent_id"], denied["session_id"]) == (
        spawned.subagent_id,
        spawned.session_id,
    )
    assert json.loads(denied["context"])["reason"] == why
    prompts = stored_lines(daemon, spawned.session_id, "user")
    # Answering it now would start that claude again: refused, and nothing is written.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await agents.AnswerPermission(
            agent_pb2.AnswerPermissionRequest(
                request_id=asked.request_id, decision=Decision.PERMISSION_DECISION_ALLOW_ONCE
            )
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert refused.value.details() == (
        f"permission request {asked.request_id!r} was withdrawn: {why}"
    )
    assert stored_lines(daemon, spawned.session_id, "control_response") == []
    assert stored_lines(daemon, spawned.session_id, "user") == prompts
    assert (session.supervisor.state, session.supervisor.pid) == (SupervisorState.IDLE, None)


async def test_a_subagent_whose_claude_crashes_as_its_answer_is_applied_is_not_started_again(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent, spawned, asked = await a_subagent_asking(clients, workspace, stub)
    assert daemon.daemon.sessions is not None
    session = await daemon.daemon.sessions.get(spawned.session_id)
    write_control = session.write_control

    async def crash_first(*args: Any) -> bool:
        """claude dies after the answer was checked and recorded, before it is written."""
        assert session.supervisor.pid is not None
        os.kill(session.supervisor.pid, signal.SIGKILL)
        await until(lambda: session.supervisor.state is SupervisorState.RESTARTING)
        return await write_control(*args)

    monkeypatch.setattr(session, "write_control", crash_first)
    parent.answer(asked.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    events = await finished(stub, spawned.subagent_id)

    assert events[-1].WhichOneof("event") == "failed"
    resolved = (await parent.wait_for("permission_resolved")).permission_resolved
    assert (resolved.request_id, resolved.outcome) == (asked.request_id, "allowed")
    # Neither the answer nor a note about it reached a claude started again for it.
    assert stored_lines(daemon, spawned.session_id, "control_response") == []
    assert len(stored_lines(daemon, spawned.session_id, "user")) == 1  # the prompt only
    assert (session.supervisor.state, session.supervisor.pid) == (SupervisorState.IDLE, None)


async def test_a_subagent_past_its_wall_clock_limit_is_stopped_and_failed(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
) -> None:
    assert daemon.daemon.subagents is not None
    manager = daemon.daemon.subagents.manager
    # Below the settings' 1-minute floor, as code (not a user) may set it.
    manager.apply_settings(dataclasses.replace(manager.settings, timeout_seconds=1.0))
    parent = await parent_session(clients, workspace)
    spawned = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id,
            prompt='SCN:slow {"words": 400, "delay": 0.05} too long',
        )
    )
    events = await finished(stub, spawned.subagent_id)

    assert events[-1].WhichOneof("event") == "failed"
    assert "timed out" in events[-1].failed.error_message
    session = await daemon.daemon.sessions.get(spawned.session_id)  # type: ignore[union-attr]
    assert session.supervisor.state is SupervisorState.IDLE
    [row] = await audited(daemon, "subagent_fail")
    assert row["subagent_id"] == spawned.subagent_id


async def test_an_exclusive_worktree_lock_refuses_or_queues_the_next_subagent_there(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
) -> None:
    parent = await parent_session(clients, workspace)
    holder = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id,
            prompt='SCN:slow {"words": 400, "delay": 0.05} mine alone',
            worktree_lock=subagent_pb2.WORKTREE_LOCK_EXCLUSIVE,
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.SpawnSubagent(
            subagent_pb2.SpawnSubagentRequest(parent_session_id=parent.session_id, prompt="x")
        )
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert dict(refused.value.trailing_metadata())["betcode-error-code"] == "WORKTREE_IN_USE"
    waiter = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id,
            prompt='SCN:plain {"text": "after the lock"}',
            wait_for_lock=True,
        )
    )
    listed = await stub.ListSubagents(subagent_pb2.ListSubagentsRequest(status_filter="pending"))
    assert [info.id for info in listed.subagents] == [waiter.subagent_id]

    await stub.CancelSubagent(subagent_pb2.CancelSubagentRequest(subagent_id=holder.subagent_id))
    events = await finished(stub, waiter.subagent_id)
    assert events[-1].completed.result_summary == "after the lock"


class FrozenClock:
    """A subagent delegation's clock that moves only when the test says (its rate buckets
    refill by it), so a call over the limit stays queued until then."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def queued_sixth_call(
    daemon: InProcessDaemon,
    parent: Client,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[subagent_pb2.SpawnSubagentResponse, FrozenClock]:
    """A subagent allowed 5 Bash calls per "minute", with queue_on_rate_limit, whose sixth
    call is held back: it waits, unanswered, neither denied nor forwarded."""
    # A minute of 3 s: a queued call asks again about every 0.6 s, and the clock decides.
    monkeypatch.setattr(limits, "MINUTE", 3.0)
    commands = [f"python3 -c \"print('call-{n}')\"" for n in range(1, 7)]
    spawned = await stub.SpawnSubagent(
        subagent_pb2.SpawnSubagentRequest(
            parent_session_id=parent.session_id,
            prompt=bash_steps(*commands),
            allowed_tools=["Bash(python3:*)"],
            auto_approve=True,
            auto_approve_config=subagent_pb2.AutoApproveConfig(
                bash_commands_per_minute=5, queue_on_rate_limit=True
            ),
        )
    )
    assert daemon.daemon.subagents is not None
    clock = FrozenClock()
    daemon.daemon.subagents.manager.runs[spawned.subagent_id].delegation.clock = clock

    def asked() -> list[str]:
        return stored_lines(daemon, spawned.session_id, "control_request")

    await until(lambda: len(asked()) == 6, 60)
    await asyncio.sleep(2)  # about three more asks of the queued call
    answered = stored_lines(daemon, spawned.session_id, "control_response")
    assert len(answered) == 5
    assert json.loads(asked()[-1])["request_id"] not in "".join(answered)
    assert audit(daemon, "rate_limit_exceeded") == []
    assert parent.of_kind("permission_request") == []
    return spawned, clock


def stored_lines(daemon: InProcessDaemon, session_id: str, message_type: str) -> list[str]:
    """The NDJSON lines of one type a session's claude wrote or was sent, in order."""
    conn = sqlite3.connect(daemon.config.data_dir / "daemon.db")
    try:
        query = (
            "SELECT payload FROM messages WHERE session_id = ? AND message_type = ? "
            "ORDER BY sequence"
        )
        return [payload for (payload,) in conn.execute(query, (session_id, message_type))]
    finally:
        conn.close()


async def test_with_queue_on_rate_limit_a_call_over_the_limit_waits_then_runs(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent = await parent_session(clients, workspace)
    spawned, clock = await queued_sixth_call(daemon, parent, stub, monkeypatch)

    clock.now += 1  # the Bash bucket has a token again (one each 0.6 s)
    events = await finished(stub, spawned.subagent_id)

    assert "ok: call-6" in events[-1].completed.result_summary
    approved = [
        row
        for row in audit(daemon, "auto_approve_tool_call")
        if row["subagent_id"] == spawned.subagent_id
    ]
    assert len(approved) == 6
    held = json.loads(approved[-1]["context"])
    assert held["queued_for"] == "bash_commands_per_minute"
    assert float(held["queued_seconds"]) >= 2
    assert "queued_seconds" not in json.loads(approved[-2]["context"])
    assert audit(daemon, "rate_limit_exceeded") == []


async def test_a_call_queued_for_the_rate_limit_is_withdrawn_when_the_subagent_is_cancelled(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    channel: grpc.aio.Channel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent = await parent_session(clients, workspace)
    spawned, clock = await queued_sixth_call(daemon, parent, stub, monkeypatch)

    response = await stub.CancelSubagent(
        subagent_pb2.CancelSubagentRequest(subagent_id=spawned.subagent_id, reason="enough")
    )
    clock.now += 1  # the limit would let it through now: it is gone, not answered
    await asyncio.sleep(2)

    assert (response.cancelled, response.tool_calls_auto_approved) == (True, 5)
    # Nothing answered claude (that would start it again), nothing waits in the parent's inbox.
    assert len(stored_lines(daemon, spawned.session_id, "control_response")) == 5
    agents = agent_pb2_grpc.AgentServiceStub(channel)
    listed = await agents.ListPendingPermissions(agent_pb2.ListPendingPermissionsRequest())
    assert list(listed.pending) == []
    assert daemon.daemon.sessions is not None
    session = await daemon.daemon.sessions.get(spawned.session_id)
    assert session.supervisor.state is SupervisorState.IDLE


async def test_a_call_queued_for_the_rate_limit_asks_the_user_after_a_revoke(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent = await parent_session(clients, workspace)
    spawned, _ = await queued_sixth_call(daemon, parent, stub, monkeypatch)

    revoked = await stub.RevokeAutoApprove(
        subagent_pb2.RevokeAutoApproveRequest(
            subagent_id=spawned.subagent_id, reason="the user takes over the rest"
        )
    )

    assert revoked.revoked
    asked = (await parent.wait_for("permission_request")).permission_request
    command = asked.input["command"]
    assert isinstance(command, str), command
    assert "call-6" in command
    parent.answer(asked.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    events = await finished(stub, spawned.subagent_id)
    assert "ok: call-6" in events[-1].completed.result_summary
    assert audit(daemon, "rate_limit_exceeded") == []


async def step_in_its_own_worktree(
    daemon: InProcessDaemon,
    parent: Client,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    root: Path,
    step: subagent_pb2.OrchestrationStep,
) -> tuple[Path, str, Path]:
    """A real repository (with an origin) registered with the daemon, and a plan whose one
    step runs in a worktree the daemon makes for it: the repository, the step's subagent and
    its worktree."""
    _, repo = make_repository(root)
    assert daemon.daemon.worktrees is not None
    await daemon.daemon.worktrees.repos.register(str(repo), RepoChanges())
    step.working_directory = str(repo)
    step.worktree = True
    created = await stub.CreateOrchestration(
        subagent_pb2.CreateOrchestrationRequest(parent_session_id=parent.session_id, steps=[step])
    )
    watch = stub.WatchOrchestration(
        subagent_pb2.WatchOrchestrationRequest(orchestration_id=created.orchestration_id),
        timeout=60,
    )
    async for event in watch:
        if event.HasField("step_started"):
            break
    watch.cancel()
    [subagent] = (await stub.ListSubagents(subagent_pb2.ListSubagentsRequest())).subagents
    assert subagent.id == event.step_started.subagent_id
    return repo.resolve(), subagent.id, Path(subagent.working_directory)


def on_disk(repo: Path, place: Path) -> tuple[list[str], list[str] | None]:
    """The repository's linked worktrees, and the files in `place` (None: it is gone)."""
    listing = sh(repo, "worktree", "list", "--porcelain").splitlines()
    linked = [line.split(" ", 1)[1] for line in listing if line.startswith("worktree ")][1:]
    return linked, sorted(p.name for p in place.iterdir()) if place.exists() else None


async def test_cancel_with_cleanup_worktree_removes_the_worktree_made_for_the_subagent(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    tmp_path: Path,
) -> None:
    parent = await parent_session(clients, workspace)
    repo, subagent_id, place = await step_in_its_own_worktree(
        daemon,
        parent,
        stub,
        tmp_path,
        subagent_pb2.OrchestrationStep(
            id="fix", prompt='SCN:slow {"words": 400, "delay": 0.05} working'
        ),
    )
    watch = stub.WatchSubagent(subagent_pb2.WatchSubagentRequest(subagent_id=subagent_id))
    async for event in watch:  # claude is in its turn, in the worktree
        if event.HasField("output") and event.output.text:
            break
    watch.cancel()
    assert on_disk(repo, place)[0] == [str(place)]
    branch = sh(place, "branch", "--show-current").strip()

    response = await stub.CancelSubagent(
        subagent_pb2.CancelSubagentRequest(subagent_id=subagent_id, cleanup_worktree=True)
    )

    assert (response.cancelled, response.worktree_removed) == (True, True)
    assert response.worktree_kept_reason == ""
    assert on_disk(repo, place) == ([], None)
    assert branch not in sh(repo, "branch", "--list")  # made for it, and nothing on it
    assert daemon.daemon.worktrees is not None
    assert await daemon.daemon.worktrees.manager.list_worktrees() == []
    [row] = await audited(daemon, "subagent_cancel")
    assert json.loads(row["context"])["worktree_removed"] == "True"


async def test_cleanup_worktree_keeps_a_worktree_with_work_at_risk_and_says_what(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    tmp_path: Path,
) -> None:
    parent = await parent_session(clients, workspace)
    write_then_wait = (
        "python3 -c \"import pathlib, time; pathlib.Path('notes.txt').write_text('draft'); "
        'time.sleep(60)"'
    )
    repo, subagent_id, place = await step_in_its_own_worktree(
        daemon,
        parent,
        stub,
        tmp_path,
        subagent_pb2.OrchestrationStep(
            id="draft",
            prompt=bash_steps(write_then_wait),
            allowed_tools=["Bash(python3:*)"],
            auto_approve=True,
        ),
    )
    await until((place / "notes.txt").exists, 60)

    response = await stub.CancelSubagent(
        subagent_pb2.CancelSubagentRequest(subagent_id=subagent_id, cleanup_worktree=True)
    )

    assert (response.cancelled, response.worktree_removed) == (True, False)
    assert "1 untracked file (notes.txt)" in response.worktree_kept_reason
    linked, files = on_disk(repo, place)
    assert linked == [str(place)]
    assert files is not None
    assert "notes.txt" in files
    assert daemon.daemon.worktrees is not None
    [kept] = await daemon.daemon.worktrees.manager.list_worktrees()
    assert kept.record.path == str(place)
    [row] = await audited(daemon, "subagent_cancel")
    assert json.loads(row["context"])["worktree_kept_reason"] == response.worktree_kept_reason


async def test_cleanup_worktree_is_not_held_back_by_the_cancelled_subagents_own_question(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    stub: subagent_pb2_grpc.SubagentServiceStub,
    tmp_path: Path,
) -> None:
    parent = await parent_session(clients, workspace)
    repo, subagent_id, place = await step_in_its_own_worktree(
        daemon,
        parent,
        stub,
        tmp_path,
        subagent_pb2.OrchestrationStep(id="ask", prompt=bash_steps('python3 -c "print(1)"')),
    )
    asked = (await parent.wait_for("permission_request")).permission_request

    response = await stub.CancelSubagent(
        subagent_pb2.CancelSubagentRequest(subagent_id=subagent_id, cleanup_worktree=True)
    )

    assert (response.cancelled, response.worktree_removed) == (True, True)
    assert response.worktree_kept_reason == ""
    assert on_disk(repo, place) == ([], None)
    resolved = (await parent.wait_for("permission_resolved")).permission_resolved
    assert (resolved.request_id, resolved.outcome) == (asked.request_id, "cancelled")
