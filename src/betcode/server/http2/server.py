"""The daemon's gRPC server on its own HTTP/2 transport, in the daemon's event loop.

It takes method handlers the way a grpc.aio server does (generated ``add_*_to_server``
functions, the health and reflection services register themselves unchanged), listens on
sockets bound up front (so a bind error is raised where the address is given), and stops in
three steps: GOAWAY and wait for calls in flight, then end the rest with UNAVAILABLE, then close.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, cast

import grpc
import h2.config
import h2.connection
import h2.errors

from betcode.server.http2.connection import GrpcConnection, TransportSettings

LISTEN_BACKLOG = 128
# After the grace period, how long calls ended by the shutdown get to send their status.
STATUS_FLUSH_SECONDS = 1.0


class _CallDetails(NamedTuple):  # grpc.HandlerCallDetails, for generic handlers
    method: str
    invocation_metadata: tuple[Any, ...]


class GrpcServer:
    def __init__(self, settings: TransportSettings) -> None:
        self._settings = settings
        self._methods: dict[str, grpc.RpcMethodHandler] = {}
        self._generic: list[grpc.GenericRpcHandler] = []
        self._sockets: list[socket.socket] = []
        self._listeners: list[asyncio.AbstractServer] = []
        self._connections: set[GrpcConnection] = set()
        self._stopped: asyncio.Event | None = None

    # ---- handlers ----

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)

    def add_registered_method_handlers(
        self, service_name: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        for name, handler in handlers.items():
            self._methods[f"/{service_name}/{name}"] = handler

    def handler_for(self, path: str) -> grpc.RpcMethodHandler | None:
        handler = self._methods.get(path)
        if handler is not None:
            return handler
        for generic in self._generic:
            handler = generic.service(_CallDetails(path, ()))
            if handler is not None:
                return handler
        return None

    # ---- sockets ----

    def bind_unix(self, path: Path) -> None:
        """Binds and listens on a Unix socket path (raises OSError)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(os.fspath(path))
            sock.listen(LISTEN_BACKLOG)
        except OSError:
            sock.close()
            raise
        self._sockets.append(sock)

    def bind_tcp(self, host: str, port: int) -> int:
        """Binds every address ``host`` resolves to, on one port (port 0: a free one, the
        same for all); returns the port. Raises OSError."""
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        bound: list[socket.socket] = []
        try:
            for family, kind, proto, _, address in addresses:
                sock = socket.socket(family, kind, proto)
                bound.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind((address[0], port, *address[2:]))
                except OSError as error:
                    if bound[:-1] and error.errno == errno.EADDRNOTAVAIL:
                        bound.pop().close()  # e.g. ::1 on a host without IPv6
                        continue
                    raise
                sock.listen(LISTEN_BACKLOG)
                port = sock.getsockname()[1]
        except OSError:
            for sock in bound:
                sock.close()
            raise
        self._sockets.extend(bound)
        return port

    # ---- lifecycle ----

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        for sock in self._sockets:
            if sock.family == socket.AF_UNIX:
                server = await loop.create_unix_server(self._connection, sock=sock)
            else:
                server = await loop.create_server(self._connection, sock=sock)
            self._listeners.append(server)

    @property
    def connections(self) -> frozenset[GrpcConnection]:
        """The open client connections."""
        return frozenset(self._connections)

    def _connection(self) -> asyncio.Protocol:
        if len(self._connections) >= self._settings.limits.max_connections:
            return _RefusedConnection()
        connection = GrpcConnection(self, self._settings, self._connections.discard)
        self._connections.add(connection)
        return connection

    async def stop(self, grace: float | None) -> None:
        """Stops listening, lets calls in flight finish for up to ``grace`` seconds, ends
        the others with UNAVAILABLE, then closes every connection."""
        for listener in self._listeners:
            listener.close()
        connections = list(self._connections)
        for connection in connections:
            connection.drain()
        if grace:
            await self._calls_ended(connections, within=grace)
        for connection in connections:
            connection.end_calls(grpc.StatusCode.UNAVAILABLE, "the daemon is shutting down")
        await self._calls_ended(connections, within=STATUS_FLUSH_SECONDS)
        for connection in connections:
            connection.close()
        for sock in self._sockets:
            sock.close()
        if self._stopped is not None:
            self._stopped.set()

    @staticmethod
    async def _calls_ended(connections: list[GrpcConnection], *, within: float) -> None:
        waits = [connection.idle.wait() for connection in connections]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await asyncio.gather(*waits)

    async def wait_for_termination(self) -> None:
        if self._stopped is not None:
            await self._stopped.wait()


class _RefusedConnection(asyncio.Protocol):
    """A connection over the cap: the server's preface and GOAWAY (ENHANCE_YOUR_CALM, no
    stream taken up), then the connection is closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        connection.initiate_connection()
        connection.close_connection(
            h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, b"too many connections", last_stream_id=0
        )
        cast(asyncio.Transport, transport).write(connection.data_to_send())
        transport.close()
