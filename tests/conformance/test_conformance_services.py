"""The daemon's other services through plain stubs, and a sweep over every method it serves
(as server reflection lists them): an empty request never crashes a handler (UNKNOWN) and
every streaming method sends its headers before anything else."""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import MethodDescriptor
from grpc_health.v1 import health_pb2 as standard_health_pb2
from grpc_health.v1 import health_pb2_grpc as standard_health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from stub_calls import Served, headers_of

import betcode.v1
from betcode.v1 import health_pb2, health_pb2_grpc, version_pb2, version_pb2_grpc

pytestmark = pytest.mark.real_cli
Code = grpc.StatusCode
REFLECTION = "grpc.reflection.v1alpha.ServerReflection"
# Methods this daemon does not serve (yet): UNIMPLEMENTED. ExchangeKeys is relay-only by
# contract; a method served once must not fall back to this list.
NOT_SERVED_LOCALLY = {
    "betcode.v1.AgentService/ExchangeKeys",
    "betcode.v1.CommandService/GetPluginStatus",
    "betcode.v1.CommandService/AddPlugin",
    "betcode.v1.CommandService/RemovePlugin",
    "betcode.v1.CommandService/EnablePlugin",
    "betcode.v1.CommandService/DisablePlugin",
    "betcode.v1.ConfigService/ListMcpServers",
    "grpc.health.v1.Health/List",
}
# A client mistake or a refusal the contract names; anything else from an empty request is not.
CLIENT_SIDE = {Code.OK, Code.INVALID_ARGUMENT, Code.NOT_FOUND, Code.FAILED_PRECONDITION}

for module in pkgutil.iter_modules(betcode.v1.__path__):  # every message type, for the sweep
    if module.name.endswith("_pb2"):
        importlib.import_module(f"betcode.v1.{module.name}")


@pytest.fixture
async def channel(served: Served) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(served.tcp) as opened:
        yield opened


async def test_health_and_version(channel: grpc.aio.Channel) -> None:
    standard = standard_health_pb2_grpc.HealthStub(channel)
    serving = standard_health_pb2.HealthCheckResponse.SERVING
    checked = await standard.Check(standard_health_pb2.HealthCheckRequest(service=""))
    assert checked.status == serving
    watch = standard.Watch(standard_health_pb2.HealthCheckRequest(service=""))
    await headers_of(watch)
    assert (await watch.read()).status == serving
    watch.cancel()
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await standard.Check(standard_health_pb2.HealthCheckRequest(service="no.Such"))
    assert unknown.value.code() == Code.NOT_FOUND

    ours = health_pb2_grpc.HealthStub(channel)
    agent = await ours.Check(health_pb2.HealthCheckRequest(service="betcode.v1.AgentService"))
    assert agent.status == health_pb2.SERVING
    details = await health_pb2_grpc.BetCodeHealthStub(channel).GetHealthDetails(
        health_pb2.HealthDetailsRequest()
    )
    assert {"sqlite", "local_server"} <= {c.name for c in details.components}

    versions = version_pb2_grpc.VersionServiceStub(channel)
    version = await versions.GetVersion(version_pb2.GetVersionRequest())
    assert version.api_version
    assert version.server_version
    negotiated = await versions.NegotiateCapabilities(
        version_pb2.NegotiateRequest(client_version="0.1.0", client_type="cli")
    )
    assert negotiated.ByteSize() > 0


async def served_methods(channel: grpc.aio.Channel) -> list[MethodDescriptor]:
    call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo()
    await headers_of(call)  # a bidi stream too: headers before the first request
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    listed = await call.read()
    call.cancel()
    pool = descriptor_pool.Default()
    methods: list[MethodDescriptor] = []
    for service in listed.list_services_response.service:
        if service.name != REFLECTION:
            methods.extend(pool.FindServiceByName(service.name).methods)
    return methods


async def call_empty(channel: grpc.aio.Channel, method: MethodDescriptor) -> grpc.StatusCode:
    """The status of the method called with an empty request; a stream is given its first
    answer (or its end) and then cancelled, once its headers came first."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    request = message_factory.GetMessageClass(method.input_type)()
    response = message_factory.GetMessageClass(method.output_type)
    if method.client_streaming:
        stream = channel.stream_stream(path, lambda m: m.SerializeToString(), response.FromString)()
        await headers_of(stream)
        stream.cancel()
        return Code.OK
    if not method.server_streaming:
        unary = channel.unary_unary(path, lambda m: m.SerializeToString(), response.FromString)
        try:
            await unary(request, timeout=30)
        except grpc.aio.AioRpcError as error:
            return error.code()
        return Code.OK
    call = channel.unary_stream(path, lambda m: m.SerializeToString(), response.FromString)(request)
    try:
        await headers_of(call)
        async with asyncio.timeout(5):
            await call.read()
    except TimeoutError:
        pass  # a stream with nothing to say yet (its headers came)
    except grpc.aio.AioRpcError as error:
        return error.code()
    finally:
        call.cancel()
    return Code.OK


async def test_every_served_method_handles_an_empty_request(channel: grpc.aio.Channel) -> None:
    methods = await served_methods(channel)
    names = {f"{m.containing_service.full_name}/{m.name}" for m in methods}
    assert {"betcode.v1.AgentService/Converse", "betcode.v1.VersionService/GetVersion"} <= names
    statuses = {
        f"{m.containing_service.full_name}/{m.name}": await call_empty(channel, m)
        for m in methods
        if m.name != "Converse"  # its start rules have tests of their own
    }
    wrong = {
        name: status.name
        for name, status in statuses.items()
        if status not in CLIENT_SIDE
        and not (name in NOT_SERVED_LOCALLY and status == Code.UNIMPLEMENTED)
    }
    assert wrong == {}
