"""grpc.aio's server with the interface of BetCode's own (``daemon.grpc.server = "grpcio"``).

A fallback should a client stack ever misbehave with BetCode's transport: the same servicers
and the same wire behaviour (response headers first on streaming calls, via HeadersFirst), at
a higher CPU cost per streamed event. Of the ``daemon.grpc`` limits it takes the concurrency
limit and the idle timeout; grpc-core has its own for the rest.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import grpc
import grpc.aio

from betcode.server.headers_first import HeadersFirst
from betcode.server.http2.connection import TransportSettings

# Clients pinging as often as the server does must not be taken for abusive (grpc-core's default
# minimum is 5 minutes, after which it sends GOAWAY "too_many_pings").
MIN_CLIENT_PING_INTERVAL_MS = 10_000


def server_options(settings: TransportSettings) -> list[tuple[str, int]]:
    limits = settings.limits
    options = [
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.keepalive_time_ms", round(settings.keepalive_time_s * 1000)),
        ("grpc.keepalive_timeout_ms", round(settings.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
        # gRPC sets SO_REUSEPORT by default: a second daemon could then share our TCP port.
        ("grpc.so_reuseport", 0),
    ]
    if limits.idle_timeout_seconds:
        options.append(("grpc.max_connection_idle_ms", round(limits.idle_timeout_seconds * 1000)))
    return options


class GrpcioServer:
    def __init__(self, settings: TransportSettings) -> None:
        self._server = grpc.aio.server(
            options=server_options(settings), interceptors=[HeadersFirst()]
        )

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(tuple(handlers))

    def add_registered_method_handlers(
        self, service_name: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service_name, dict(handlers)),)
        )
        self._server.add_registered_method_handlers(service_name, dict(handlers))

    def bind_unix(self, path: Path) -> None:
        self._bind(f"unix:{os.fspath(path)}")

    def bind_tcp(self, host: str, port: int) -> int:
        return self._bind(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")

    def _bind(self, target: str) -> int:
        try:
            port: int = self._server.add_insecure_port(target)
        except RuntimeError as error:  # gRPC gives no reason beyond "Failed to bind"
            raise OSError(errno.EADDRNOTAVAIL, "the address is in use or not available") from error
        return port

    async def start(self) -> None:
        await self._server.start()

    async def stop(self, grace: float | None) -> None:
        await self._server.stop(grace)

    async def wait_for_termination(self) -> None:
        await self._server.wait_for_termination()
