"""Service registration on a real server: reflection, raw-bytes responses, UNIMPLEMENTED,
BetCodeError mapping over the wire, and a 10 MiB event in both directions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from server_harness import connect, make_daemon

from betcode.core.errors import BetCodeError, ErrorCode, error_code_of, error_details_of
from betcode.server.app import DaemonServer, RpcService, method_handlers
from betcode.server.errors import handles_errors
from betcode.server.framing import encode_event_batch
from betcode.v1 import agent_pb2, agent_pb2_grpc

AGENT_SERVICE = agent_pb2.DESCRIPTOR.services_by_name["AgentService"]
TEN_MIB = 10 * 1024 * 1024


def _event(seq: int, text: str = "") -> agent_pb2.AgentEvent:
    return agent_pb2.AgentEvent(sequence=seq, text_delta=agent_pb2.TextDelta(text=text))


class FakeAgentService:
    """Stands in for the real AgentService: replays stored frames, echoes input."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames

    @handles_errors
    async def ResumeSession(
        self, request: agent_pb2.ResumeSessionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        if request.session_id != "s1":
            raise BetCodeError(
                ErrorCode.SESSION_NOT_FOUND,
                f"no session {request.session_id!r}",
                {"session_id": request.session_id},
            )
        for frame in self.frames[request.from_sequence :]:
            yield frame
        raise BetCodeError(ErrorCode.SUBPROCESS_CRASHED, "claude crashed; restarting")

    async def ResumeSessionBatched(
        self, request: agent_pb2.ResumeSessionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        yield encode_event_batch(self.frames)

    async def Converse(
        self,
        requests: AsyncIterator[agent_pb2.AgentRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[agent_pb2.AgentEvent]:
        seq = 0
        async for request in requests:
            seq += 1
            yield agent_pb2.AgentEvent(
                sequence=seq, user_input=agent_pb2.UserInput(content=request.message.content)
            )


@pytest.fixture
async def agent_channel(socket_path: Path) -> AsyncIterator[grpc.aio.Channel]:
    frames = [_event(seq, f"part {seq}").SerializeToString() for seq in range(1, 6)]
    service = RpcService(
        AGENT_SERVICE,
        FakeAgentService(frames),
        raw_responses=frozenset({"ResumeSession", "ResumeSessionBatched"}),
    )
    server: DaemonServer = make_daemon(services=[service])
    await server.start(socket_path)
    async with connect(f"unix:{socket_path}") as channel:
        yield channel
    await server.stop(grace_s=0)


async def _reflect(
    channel: grpc.aio.Channel, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo()
    await call.write(request)
    await call.done_writing()
    response: reflection_pb2.ServerReflectionResponse = await call.read()
    return response


async def test_reflection_lists_every_registered_service(agent_channel: grpc.aio.Channel) -> None:
    response = await _reflect(
        agent_channel, reflection_pb2.ServerReflectionRequest(list_services="")
    )
    names = {service.name for service in response.list_services_response.service}
    assert names == {
        "betcode.v1.AgentService",
        "betcode.v1.Health",
        "betcode.v1.BetCodeHealth",
        "betcode.v1.VersionService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }


async def test_reflection_describes_the_agent_service(agent_channel: grpc.aio.Channel) -> None:
    response = await _reflect(
        agent_channel,
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="betcode.v1.AgentService"),
    )
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in response.file_descriptor_response.file_descriptor_proto
    ]
    agent_file = next(f for f in files if f.name == "betcode/v1/agent.proto")
    methods = {m.name for m in agent_file.service[0].method}
    assert {"Converse", "ResumeSessionBatched", "AnswerPermission"} <= methods


async def test_raw_frames_arrive_as_events(agent_channel: grpc.aio.Channel) -> None:
    stub = agent_pb2_grpc.AgentServiceStub(agent_channel)
    call = stub.ResumeSession(agent_pb2.ResumeSessionRequest(session_id="s1", from_sequence=2))
    received: list[agent_pb2.AgentEvent] = []
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await _collect(call, received)
    assert [e.sequence for e in received] == [3, 4, 5]
    assert received[0].text_delta.text == "part 3"
    # The fake ends its replay with SUBPROCESS_CRASHED: a mid-stream error arrives after the
    # events already sent.
    assert failure.value.code() == grpc.StatusCode.INTERNAL
    assert error_code_of(failure.value) == ErrorCode.SUBPROCESS_CRASHED

    batches = [b async for b in stub.ResumeSessionBatched(agent_pb2.ResumeSessionRequest())]
    assert [e.sequence for e in batches[0].events] == [1, 2, 3, 4, 5]


async def _collect(call: grpc.aio.UnaryStreamCall, into: list[agent_pb2.AgentEvent]) -> None:
    async for event in call:
        into.append(event)


async def test_betcode_error_becomes_status_code_and_details(
    agent_channel: grpc.aio.Channel,
) -> None:
    stub = agent_pb2_grpc.AgentServiceStub(agent_channel)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        async for _ in stub.ResumeSession(agent_pb2.ResumeSessionRequest(session_id="nope")):
            pass
    assert failure.value.code() == grpc.StatusCode.NOT_FOUND
    assert failure.value.details() == "no session 'nope'"
    assert error_code_of(failure.value) == ErrorCode.SESSION_NOT_FOUND
    assert error_details_of(failure.value) == {"session_id": "nope"}


async def test_a_method_the_servicer_lacks_is_unimplemented(
    agent_channel: grpc.aio.Channel,
) -> None:
    stub = agent_pb2_grpc.AgentServiceStub(agent_channel)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.ListSessions(agent_pb2.ListSessionsRequest())
    assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_a_ten_mib_event_travels_both_ways(agent_channel: grpc.aio.Channel) -> None:
    content = "y" * TEN_MIB
    call = agent_pb2_grpc.AgentServiceStub(agent_channel).Converse()
    await call.write(agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content=content)))
    echoed: agent_pb2.AgentEvent = await call.read()
    await call.done_writing()
    assert echoed.user_input.content == content


def test_registration_refuses_a_sync_method() -> None:
    class SyncService:
        def ListSessions(self, request: object, context: object) -> None: ...

    with pytest.raises(TypeError, match=r"SyncService.ListSessions must be `async def`"):
        method_handlers(RpcService(AGENT_SERVICE, SyncService()))


def test_registration_refuses_an_unknown_raw_method() -> None:
    with pytest.raises(ValueError, match="has no methods"):
        method_handlers(RpcService(AGENT_SERVICE, object(), raw_responses=frozenset({"Resume"})))
