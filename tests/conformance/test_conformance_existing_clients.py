"""What the existing clients of betcode.v1 (the Rust terminal CLI, its mobile app) do, replayed
step by step over TCP and over the Unix socket (docs/GRPC.md#upstream-compatibility):

1. they wait for the response headers of a stream before they write on it;
2. they choose a new session's id themselves (a UUID) and start Converse with it;
3. they continue a session by collecting ResumeSession until it ENDS, then open Converse
   without `from_sequence` and expect only what happens from then on.
"""

from __future__ import annotations

import asyncio
import uuid

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

from betcode.v1 import agent_pb2, agent_pb2_grpc

pytestmark = pytest.mark.real_cli
METADATA = (("x-client-id", "independent-client"),)


async def test_a_new_session_with_the_id_the_client_chose(
    channel: grpc.aio.Channel, served: Served
) -> None:
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    session_id = str(uuid.uuid4())
    # It first asks for the new id's history, and tolerates the error.
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await collect(stub.ResumeSession(agent_pb2.ResumeSessionRequest(session_id=session_id)))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND

    call = stub.Converse(metadata=METADATA)
    await headers_of(call)  # before `start` is written: the daemon must not wait for it
    await call.write(start_request(session_id=session_id, working_directory=str(served.project)))
    first = await read_until(call, "session_info")
    assert first[-1].session_info.session_id == session_id
    await call.write(message_request(PLAIN_PROMPT))
    turn = await read_until(call, "turn_complete")
    text = "".join(e.text_delta.text for e in turn if kind(e) == "text_delta")
    assert "Hello from the mock model." in text
    call.cancel()

    listed = await stub.ListSessions(agent_pb2.ListSessionsRequest(), metadata=METADATA)
    assert [s.id for s in listed.sessions] == [session_id]


async def test_continuing_a_session_reads_the_history_to_its_end_then_only_new_events(
    channel: grpc.aio.Channel, served: Served
) -> None:
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    first = stub.Converse(metadata=METADATA)
    await first.write(start_request(working_directory=str(served.project)))
    session_id = (await read_until(first, "session_info"))[-1].session_info.session_id
    await first.write(message_request(PLAIN_PROMPT))
    await read_until(first, "turn_complete")
    first.cancel()

    # The history: the stream ends after the stored events (it would hang the client else).
    history = await collect(
        stub.ResumeSession(
            agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=0),
            metadata=METADATA,
        )
    )
    stored = [e.sequence for e in history]
    assert stored == list(range(1, len(stored) + 1))
    assert kind(history[0]) == "session_info"
    assert "turn_complete" in [kind(e) for e in history]

    # Then Converse without from_sequence: live only. An old TurnComplete here would end a
    # headless run before its own turn.
    again = stub.Converse(metadata=METADATA)
    await headers_of(again)
    await again.write(start_request(session_id=session_id))
    await again.write(message_request(PLAIN_PROMPT))
    turn = await read_until(again, "turn_complete")
    again.cancel()
    assert all(e.sequence > stored[-1] for e in turn), [e.sequence for e in turn]
    assert kind(turn[0]) != "session_info"
    assert "user_input" in [kind(e) for e in turn]


async def test_concurrent_starts_of_one_new_id_make_one_session(
    channel: grpc.aio.Channel, served: Served
) -> None:
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    session_id = str(uuid.uuid4())
    calls = [stub.Converse(metadata=((("x-client-id", f"racer-{n}"),))) for n in range(5)]
    start = start_request(
        session_id=session_id, working_directory=str(served.project), from_sequence=0
    )
    await asyncio.gather(*(call.write(start) for call in calls))
    infos = await asyncio.gather(*(read_until(call, "session_info") for call in calls))
    for call in calls:
        call.cancel()
    # Every racer sees the one session's one SessionInfo, sequence 1.
    assert {(i[-1].sequence, i[-1].session_info.session_id) for i in infos} == {(1, session_id)}
    listed = await stub.ListSessions(agent_pb2.ListSessionsRequest())
    assert [s.id for s in listed.sessions] == [session_id]


@pytest.mark.parametrize(
    "session_id", ["not-a-uuid", "0b7e2c1a5d434f6e9a213c8d2e4f5a6b", "0b7e2c1a-5d43-4f6e-9a21"]
)
async def test_a_new_id_that_is_not_a_uuid_is_invalid_argument(
    channel: grpc.aio.Channel, served: Served, session_id: str
) -> None:
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    call = stub.Converse(metadata=METADATA)
    await headers_of(call)
    await call.write(start_request(session_id=session_id, working_directory=str(served.project)))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call.read()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "UUID" in (refused.value.details() or "")
    listed = await stub.ListSessions(agent_pb2.ListSessionsRequest())
    assert listed.total == 0
