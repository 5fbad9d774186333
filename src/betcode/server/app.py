"""The daemon's gRPC server: service registration, reflection, binding, shutdown.

The server is BetCode's own HTTP/2 transport (server/http2/), which writes the events a
stream has ready together instead of one message per socket write, or grpc.aio's server
(``daemon.grpc.server = "grpcio"``, server/grpcio_server.py) as a fallback; docs/TRANSPORT.md.

Services are plain objects with ``async def`` (or async generator) methods named like the RPCs,
registered from their descriptors; a method a servicer does not define answers UNIMPLEMENTED.
A method listed in ``raw_responses`` returns or yields already-serialized response bytes, so
events serialized once at commit time are never re-encoded per client.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health_pb2 as standard_health_pb2
from grpc_health.v1 import health_pb2_grpc as standard_health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from betcode.config.settings import GrpcSettings
from betcode.daemon_socket import (
    BindError,
    LoopbackAddress,
    SocketClaim,
    claim_socket_path,
    owner_only_umask,
    parse_listen_address,
)
from betcode.server.grpcio_server import GrpcioServer
from betcode.server.health import ComponentReport, HealthDetailsService, HealthMonitor
from betcode.server.http2.connection import TransportSettings
from betcode.server.http2.server import GrpcServer
from betcode.server.version_service import VersionService
from betcode.v1 import health_pb2, version_pb2

# One event may carry a 10 MiB payload (daemon.max_payload_bytes). Re-encoding a tool's JSON
# input as a protobuf Struct adds a few bytes per value, and the envelope adds a little more;
# 16 MiB leaves room for both. Batches are capped far below this by the sender, and a single
# event above it is cut at ingest, so no legitimate message is refused. Requests get the same
# limit (prompts are capped at 1 MB by validation, attachments are bytes fields).
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
KEEPALIVE_TIME_S = 30.0  # docs/GRPC.md#transport: HTTP/2 PING after 30 s without a word ...
KEEPALIVE_TIMEOUT_S = 20.0  # ... and drop the connection if unanswered for 20 s

_HANDLER_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


@dataclass(frozen=True)
class RpcService:
    descriptor: ServiceDescriptor
    servicer: object
    # Methods whose handler returns or yields serialized response bytes instead of messages.
    raw_responses: frozenset[str] = field(default_factory=frozenset)


def method_handlers(service: RpcService) -> dict[str, grpc.RpcMethodHandler]:
    """gRPC method handlers for the methods the servicer defines."""
    known = set(service.descriptor.methods_by_name)
    if not service.raw_responses <= known:
        unknown = sorted(service.raw_responses - known)
        raise ValueError(f"{service.descriptor.full_name} has no methods {unknown}")
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.descriptor.methods:
        behaviour: Any = getattr(service.servicer, method.name, None)
        if behaviour is None:
            continue
        if not (inspect.iscoroutinefunction(behaviour) or inspect.isasyncgenfunction(behaviour)):
            raise TypeError(
                f"{type(service.servicer).__name__}.{method.name} must be `async def` "
                "or an async generator to be served"
            )
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        raw = method.name in service.raw_responses
        factory = _HANDLER_FACTORIES[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = factory(
            behaviour,
            request_deserializer=request_class.FromString,
            response_serializer=None if raw else response_class.SerializeToString,
        )
    return handlers


def build_server(
    *,
    health: HealthMonitor,
    version: VersionService,
    services: Sequence[RpcService] = (),
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    limits: GrpcSettings | None = None,
) -> GrpcServer | GrpcioServer:
    """The server (not yet bound) with the given services, grpc.health.v1.Health,
    betcode.v1.Health, BetCodeHealth, VersionService and server reflection."""
    settings = TransportSettings(
        max_message_bytes=max_message_bytes,
        keepalive_time_s=KEEPALIVE_TIME_S,
        keepalive_timeout_s=KEEPALIVE_TIMEOUT_S,
        limits=limits or GrpcSettings(),
    )
    server = GrpcioServer(settings) if settings.limits.server == "grpcio" else GrpcServer(settings)
    health_services = health_pb2.DESCRIPTOR.services_by_name
    all_services = [
        *services,
        RpcService(health_services["Health"], health.board),
        RpcService(health_services["BetCodeHealth"], HealthDetailsService(health)),
        RpcService(version_pb2.DESCRIPTOR.services_by_name["VersionService"], version),
    ]
    for service in all_services:
        name = service.descriptor.full_name
        server.add_registered_method_handlers(name, method_handlers(service))
    standard_health_pb2_grpc.add_HealthServicer_to_server(health.standard, server)

    standard_health_name = standard_health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    names = [service.descriptor.full_name for service in all_services]
    health.track_services([*names, standard_health_name])
    reflected = [*names, standard_health_name, reflection.SERVICE_NAME]
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(reflected), server
    )
    return server


class DaemonServer:
    """The server's lifecycle: bind (socket lock first), serve, stop."""

    def __init__(
        self,
        *,
        health: HealthMonitor,
        version: VersionService,
        services: Sequence[RpcService] = (),
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        limits: GrpcSettings | None = None,
    ) -> None:
        self.health = health
        self.grpc_server = build_server(
            health=health,
            version=version,
            services=services,
            max_message_bytes=max_message_bytes,
            limits=limits,
        )
        self._claim: SocketClaim | None = None
        self.tcp_port: int | None = None
        self._serving = False

    @property
    def socket_path(self) -> Path | None:
        return self._claim.path if self._claim else None

    async def start(self, socket_path: Path, listen: str | None = None) -> None:
        """Binds the Unix socket (and ``listen``, a loopback ``HOST:PORT``) and starts serving.

        Raises ``DaemonAlreadyRunning`` or ``BindError``; nothing is left bound on failure.
        """
        tcp_address = parse_listen_address(listen) if listen else None
        await self.serve(claim_socket_path(socket_path), tcp_address)

    async def serve(self, claim: SocketClaim, tcp_address: LoopbackAddress | None) -> None:
        """Binds a socket path already claimed (and a checked loopback address) and starts
        serving. The claim is released if this fails; nothing is left bound."""
        try:
            with owner_only_umask(), _refused_as_bind_error(claim.target):
                self.grpc_server.bind_unix(claim.path)
            claim.restrict_socket()
            if tcp_address is not None:
                with _refused_as_bind_error(tcp_address.target):
                    self.tcp_port = self.grpc_server.bind_tcp(tcp_address.host, tcp_address.port)
            await self.grpc_server.start()
        except BaseException:
            claim.release()
            raise
        self._claim = claim
        self._serving = True
        self.health.add_component("local_server", self._local_server_report, critical=True)
        await self.health.refresh()

    def _local_server_report(self) -> ComponentReport:
        if not self._serving:
            return ComponentReport(False, "stopped")
        where = f"unix:{self.socket_path}"
        if self.tcp_port is not None:
            where += f", tcp port {self.tcp_port}"
        return ComponentReport(True, f"listening on {where}")

    async def stop(self, grace_s: float) -> None:
        """Reports NOT_SERVING, lets calls in flight finish for up to ``grace_s``, then
        removes the socket and releases its lock."""
        await self.health.enter_graceful_shutdown()
        self._serving = False
        await self.grpc_server.stop(grace_s)
        if self._claim is not None:
            self._claim.release()
            self._claim = None

    async def wait_for_termination(self) -> None:
        await self.grpc_server.wait_for_termination()


@contextlib.contextmanager
def _refused_as_bind_error(target: str) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        raise BindError(f"cannot listen on {target}: {error.strerror or error}") from error
