"""Every AgentService RPC through the generated stubs alone, with the errors its contract
names (agent.proto comments, docs/GRPC.md): what an independent client may rely on. A change that
breaks one of these breaks clients that are not in this repository."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from stub_calls import (
    PLAIN_PROMPT,
    Served,
    collect,
    headers_of,
    kind,
    message_request,
    read_until,
    start_request,
)

from betcode.v1 import agent_pb2, agent_pb2_grpc, common_pb2, tunnel_pb2

pytestmark = pytest.mark.real_cli
Code = grpc.StatusCode
ME = (("x-client-id", "conformance"),)
OTHER = (("x-client-id", "someone-else"),)
TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'
UNKNOWN = str(uuid.uuid4())


@pytest.fixture
async def stub(served: Served) -> AsyncIterator[agent_pb2_grpc.AgentServiceStub]:
    async with grpc.aio.insecure_channel(served.tcp) as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)


async def status_of(call: object) -> grpc.StatusCode:
    """The status a unary call or a whole stream ends with (OK if it succeeds)."""
    try:
        if isinstance(call, grpc.aio.UnaryStreamCall):
            await collect(call)
        else:
            await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error.code()
    return Code.OK


async def new_session(
    stub: agent_pb2_grpc.AgentServiceStub, served: Served
) -> tuple[grpc.aio.StreamStreamCall, str]:
    """A session with this client attached (holding the input lock)."""
    call = stub.Converse(metadata=ME)
    await call.write(start_request(working_directory=str(served.project)))
    info = (await read_until(call, "session_info"))[-1]
    return call, info.session_info.session_id


async def test_every_rpc_naming_an_unknown_session_is_not_found(
    stub: agent_pb2_grpc.AgentServiceStub,
) -> None:
    calls = {
        "ResumeSession": stub.ResumeSession(agent_pb2.ResumeSessionRequest(session_id=UNKNOWN)),
        "ResumeSessionBatched": stub.ResumeSessionBatched(
            agent_pb2.ResumeSessionRequest(session_id=UNKNOWN)
        ),
        "CompactSession": stub.CompactSession(agent_pb2.CompactSessionRequest(session_id=UNKNOWN)),
        "CancelTurn": stub.CancelTurn(agent_pb2.CancelTurnRequest(session_id=UNKNOWN)),
        "RequestInputLock": stub.RequestInputLock(agent_pb2.InputLockRequest(session_id=UNKNOWN)),
        "ListSessionGrants": stub.ListSessionGrants(
            agent_pb2.ListSessionGrantsRequest(session_id=UNKNOWN)
        ),
        "ClearSessionGrants": stub.ClearSessionGrants(
            agent_pb2.ClearSessionGrantsRequest(session_id=UNKNOWN)
        ),
        "SetSessionGrant": stub.SetSessionGrant(
            agent_pb2.SetSessionGrantRequest(session_id=UNKNOWN, tool_name="Bash", granted=True)
        ),
        "RenameSession": stub.RenameSession(
            agent_pb2.RenameSessionRequest(session_id=UNKNOWN, name="x")
        ),
        "DeleteSession": stub.DeleteSession(agent_pb2.DeleteSessionRequest(session_id=UNKNOWN)),
        "ListPendingPermissions": stub.ListPendingPermissions(
            agent_pb2.ListPendingPermissionsRequest(session_id=UNKNOWN)
        ),
        "AnswerPermission": stub.AnswerPermission(
            agent_pb2.AnswerPermissionRequest(request_id="no-such-request")
        ),
    }
    statuses = dict(zip(calls, await asyncio.gather(*map(status_of, calls.values())), strict=True))
    assert statuses == dict.fromkeys(calls, Code.NOT_FOUND)


async def test_converse_needs_start_first(stub: agent_pb2_grpc.AgentServiceStub) -> None:
    call = stub.Converse(metadata=ME)
    await headers_of(call)
    await call.write(message_request("hello"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call.read()
    assert refused.value.code() == Code.INVALID_ARGUMENT


async def test_exchange_keys_is_relay_only(stub: agent_pb2_grpc.AgentServiceStub) -> None:
    assert await status_of(stub.ExchangeKeys(tunnel_pb2.KeyExchangeRequest())) == Code.UNIMPLEMENTED


async def test_session_management_round_trip(
    stub: agent_pb2_grpc.AgentServiceStub, served: Served
) -> None:
    call, session_id = await new_session(stub, served)
    # A request that fails mid-stream is an error event for this client (sequence 0), and the
    # stream goes on; an empty request is a heartbeat.
    await call.write(agent_pb2.AgentRequest())
    await call.write(message_request(""))
    refusal = (await read_until(call, "error"))[-1]
    assert (refusal.sequence, refusal.error.code) == (0, "INVALID_REQUEST")

    listed = await stub.ListSessions(
        agent_pb2.ListSessionsRequest(working_directory=str(served.project))
    )
    assert ([s.id for s in listed.sessions], listed.total) == ([session_id], 1)

    await stub.RenameSession(agent_pb2.RenameSessionRequest(session_id=session_id, name="mine"))
    with pytest.raises(grpc.aio.AioRpcError) as bad_name:
        await stub.RenameSession(
            agent_pb2.RenameSessionRequest(session_id=session_id, name="two\nlines")
        )
    assert bad_name.value.code() == Code.INVALID_ARGUMENT
    listed = await stub.ListSessions(agent_pb2.ListSessionsRequest())
    assert [s.name for s in listed.sessions] == ["mine"]

    await stub.SetSessionGrant(
        agent_pb2.SetSessionGrantRequest(session_id=session_id, tool_name="Read", granted=True)
    )
    grants = await stub.ListSessionGrants(agent_pb2.ListSessionGrantsRequest(session_id=session_id))
    assert [(g.tool_name, g.granted) for g in grants.grants] == [("Read", True)]
    await stub.ClearSessionGrants(agent_pb2.ClearSessionGrantsRequest(session_id=session_id))
    grants = await stub.ListSessionGrants(agent_pb2.ListSessionGrantsRequest(session_id=session_id))
    assert list(grants.grants) == []

    # Nothing to cancel or compact yet; the lock can be asked for only by an attached client.
    idle = await stub.CancelTurn(agent_pb2.CancelTurnRequest(session_id=session_id))
    assert not idle.was_active
    compact = stub.CompactSession(agent_pb2.CompactSessionRequest(session_id=session_id))
    assert await status_of(compact) == Code.FAILED_PRECONDITION
    lock = stub.RequestInputLock(agent_pb2.InputLockRequest(session_id=session_id), metadata=OTHER)
    assert await status_of(lock) == Code.FAILED_PRECONDITION
    call.cancel()

    deleted = await stub.DeleteSession(agent_pb2.DeleteSessionRequest(session_id=session_id))
    assert deleted.deleted
    again = stub.DeleteSession(agent_pb2.DeleteSessionRequest(session_id=session_id))
    assert await status_of(again) == Code.NOT_FOUND


async def test_history_and_live_on_each_stream(
    stub: agent_pb2_grpc.AgentServiceStub, served: Served
) -> None:
    call, session_id = await new_session(stub, served)
    await call.write(message_request(PLAIN_PROMPT))
    await read_until(call, "turn_complete")
    # The session settles after its turn: IDLE is the last event of the turn.
    edge = (await read_until(call, "status_change")).pop().sequence

    # ResumeSession: from a sequence, to the end of what is stored.
    tail = await collect(
        stub.ResumeSession(agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=2))
    )
    assert [e.sequence for e in tail] == list(range(3, edge + 1))
    # ResumeSessionBatched: an empty batch at the end of the stored events; follow=false ends.
    batches = await collect(
        stub.ResumeSessionBatched(
            agent_pb2.ResumeSessionRequest(session_id=session_id, follow=False)
        )
    )
    assert [len(b.events) == 0 for b in batches][-1]
    assert [e.sequence for b in batches for e in b.events] == list(range(1, edge + 1))

    # Followers: ResumeSession{follow}, ResumeSessionBatched (follows when unset), and a
    # Converse replaying from a sequence, all see the next turn live.
    follower = stub.ResumeSession(
        agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=edge, follow=True)
    )
    batched = stub.ResumeSessionBatched(
        agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=edge)
    )
    replaying = stub.Converse(metadata=OTHER)
    await replaying.write(start_request(session_id=session_id, from_sequence=edge - 1))
    for stream in (follower, batched):
        await headers_of(stream)
    assert (await replaying.read()).sequence == edge  # the one event after edge - 1
    await call.write(message_request(PLAIN_PROMPT))
    live = await read_until(follower, "turn_complete")
    assert live[0].sequence == edge + 1
    seen = await read_until(replaying, "turn_complete")
    assert [e.sequence for e in seen] == [e.sequence for e in live]
    events: list[agent_pb2.AgentEvent] = []
    async with asyncio.timeout(30):
        while "turn_complete" not in [kind(e) for e in events]:
            events.extend((await batched.read()).events)
    # A batch may carry the IDLE after the TurnComplete too.
    assert [e.sequence for e in events][: len(live)] == [e.sequence for e in live]
    for stream in (call, follower, batched, replaying):
        stream.cancel()


async def test_a_permission_answered_from_another_terminal(
    stub: agent_pb2_grpc.AgentServiceStub, served: Served
) -> None:
    call, session_id = await new_session(stub, served)
    await call.write(message_request(TOOL_PROMPT))
    asked = (await read_until(call, "permission_request"))[-1].permission_request
    assert asked.tool_name == "Bash"
    pending = await stub.ListPendingPermissions(
        agent_pb2.ListPendingPermissionsRequest(session_id=session_id)
    )
    assert [p.request_id for p in pending.pending] == [asked.request_id]

    # A client attaching live-only still gets the request that waits (flagged as a replay).
    late = stub.Converse(metadata=OTHER)
    await late.write(start_request(session_id=session_id))
    resent = (await read_until(late, "permission_request"))[-1].permission_request
    assert (resent.request_id, resent.is_replay) == (asked.request_id, True)
    late.cancel()

    allow = common_pb2.PermissionDecision.PERMISSION_DECISION_ALLOW_ONCE
    answered = await stub.AnswerPermission(
        agent_pb2.AnswerPermissionRequest(request_id=asked.request_id, decision=allow),
        metadata=OTHER,
    )
    assert (answered.accepted, answered.duplicate) == (True, False)
    again = await stub.AnswerPermission(
        agent_pb2.AnswerPermissionRequest(request_id=asked.request_id, decision=allow)
    )
    assert again.duplicate
    turn = await read_until(call, "turn_complete")
    results = [e.tool_call_result for e in turn if kind(e) == "tool_call_result"]
    assert [r.output.strip() for r in results] == ["42"]
    call.cancel()
