"""Requests for a machine whose daemon is stopped wait in JetStream and reach the daemon, in
TOP-05 priority order, when it is back; the TTL drops old ones and the per-machine cap refuses
new ones (RESOURCE_EXHAUSTED, BUFFER_FULL). A relay in this event loop (its own nats-server),
the daemon in-process with the pinned real CLI and the mock model, clients through the relay."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest
from harness.environment import Workspace
from harness.relay import MACHINE, Rig, rig_fixture, until, waiting_permission

from betcode.relay.buffer import BufferSettings
from betcode.remote.frames import BUFFERED_TRAILER
from betcode.v1 import agent_pb2, common_pb2

pytestmark = pytest.mark.real_cli

rig = pytest.fixture(rig_fixture(BufferSettings(ttl_seconds=3600, max_per_machine=3)))
short_ttl_rig = pytest.fixture(rig_fixture(BufferSettings(ttl_seconds=2, max_per_machine=3)))


async def tool_output_stored(rig: Rig, session_id: str, text: str) -> bool:
    request = agent_pb2.ResumeSessionRequest(session_id=session_id)
    outputs = [
        event.tool_call_result.output
        async for event in rig.agent.ResumeSession(request, metadata=rig.metadata)
        if event.WhichOneof("event") == "tool_call_result"
    ]
    return any(text in output for output in outputs)


async def answered(call: object) -> None:
    if isinstance(call, grpc.aio.StreamStreamCall):
        async for _event in call:
            pass
    else:
        await call  # type: ignore[misc]


async def buffered(call: object) -> str:
    """The buffer's receipt of a call made while the machine is offline."""
    with pytest.raises(grpc.aio.AioRpcError) as offline:
        await answered(call)
    assert offline.value.code() == grpc.StatusCode.UNAVAILABLE, offline.value.details()
    receipt = dict(offline.value.trailing_metadata() or ()).get(BUFFERED_TRAILER)
    assert receipt, offline.value.details()
    return str(receipt)


async def one_turn(rig: Rig, start: agent_pb2.StartConversation, text: str) -> list[str]:
    """A Converse that sends one message and half-closes; the events of its turn."""
    requests = [
        agent_pb2.AgentRequest(start=start),
        agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content=text)),
    ]
    call = rig.agent.Converse(iter(requests), metadata=rig.metadata)
    kinds = []
    async for event in call:
        kinds.append(event.WhichOneof("event"))
        if kinds[-1] == "turn_complete":
            call.cancel()
            break
    return kinds


async def test_buffered_while_offline_then_delivered_by_priority(
    rig: Rig, workspace: Workspace
) -> None:
    await rig.start_daemon()
    first = agent_pb2.StartConversation(working_directory=str(workspace.repo))
    assert "turn_complete" in await one_turn(rig, first, "SCN:plain")
    [session] = (
        await rig.agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=rig.metadata)
    ).sessions
    asking_session, request_id = await waiting_permission(rig, first)
    # As `daemon restart` does: the asking claude waits on under its holder for the answer.
    await rig.stop_daemon(keep_sessions=True)

    # Offline: session control first, then a user message (a new session), then an answer.
    rename = rig.agent.RenameSession(
        agent_pb2.RenameSessionRequest(session_id=session.id, name="renamed-while-away"),
        metadata=rig.metadata,
    )
    receipts = [await buffered(rename)]
    message = rig.agent.Converse(
        iter(
            [
                agent_pb2.AgentRequest(
                    start=agent_pb2.StartConversation(working_directory=str(workspace.repo))
                ),
                agent_pb2.AgentRequest(
                    message=agent_pb2.UserMessage(content='SCN:plain {"text": "while away"}')
                ),
            ]
        ),
        metadata=rig.metadata,
    )
    receipts.append(await buffered(message))
    answer = rig.agent.AnswerPermission(
        agent_pb2.AnswerPermissionRequest(
            session_id=asking_session,
            request_id=request_id,
            decision=common_pb2.PERMISSION_DECISION_ALLOW_ONCE,
        ),
        metadata=rig.metadata,
    )
    receipts.append(await buffered(answer))
    assert len(set(receipts)) == 3
    assert rig.relay.buffer is not None
    waiting = await rig.relay.buffer.pending(MACHINE)
    assert [m.headers["betcode-method"].split("/")[1] for m in waiting] == [
        "AnswerPermission",
        "Converse",
        "RenameSession",
    ]

    await rig.start_daemon()

    async def all_delivered() -> bool:
        assert rig.relay.buffer is not None
        return not await rig.relay.buffer.pending(MACHINE)

    await until(all_delivered, 60)
    listed = (
        await rig.agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=rig.metadata)
    ).sessions
    by_id = {s.id: s for s in listed}
    assert by_id[session.id].name == "renamed-while-away"
    [created] = [s for s in listed if s.id not in (session.id, asking_session)]
    # The message (priority 2) reached the daemon before the rename (priority 3) though it
    # was buffered after it.
    assert created.created_at.ToNanoseconds() < by_id[session.id].updated_at.ToNanoseconds()
    # The approval given while the machine was away let the waiting tool call run: its output
    # (not its command, which names the same words) is in the session's history.
    await until(lambda: tool_output_stored(rig, asking_session, "hello-from-bash"), 90)
    pending = await rig.agent.ListPendingPermissions(
        agent_pb2.ListPendingPermissionsRequest(), metadata=rig.metadata
    )
    assert list(pending.pending) == []


async def test_buffer_cap_refuses_and_ttl_drops(short_ttl_rig: Rig) -> None:
    rig = short_ttl_rig
    rename = agent_pb2.RenameSessionRequest(session_id="s", name="x")
    for _ in range(3):
        await buffered(rig.agent.RenameSession(rename, metadata=rig.metadata))
    with pytest.raises(grpc.aio.AioRpcError) as full:
        await rig.agent.RenameSession(rename, metadata=rig.metadata)
    assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert dict(full.value.trailing_metadata() or ())["betcode-error-code"] == "BUFFER_FULL"
    # Not a buffered method: refused at once, nothing kept.
    with pytest.raises(grpc.aio.AioRpcError) as plain:
        await rig.agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=rig.metadata)
    assert plain.value.code() == grpc.StatusCode.UNAVAILABLE
    assert BUFFERED_TRAILER not in dict(plain.value.trailing_metadata() or ())

    async def expired() -> bool:
        assert rig.relay.buffer is not None
        return not await rig.relay.buffer.pending(MACHINE)

    await until(expired, 30)  # the 2 s TTL: JetStream dropped them
    await buffered(rig.agent.RenameSession(rename, metadata=rig.metadata))  # room again
