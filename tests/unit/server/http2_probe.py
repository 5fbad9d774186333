"""A probe service for the HTTP/2 transport tests: raw-bytes methods that exercise every call
shape and every way a call can end, served by a real GrpcServer on a real Unix socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events

from betcode.config.settings import GrpcSettings
from betcode.server.http2.connection import TransportSettings
from betcode.server.http2.server import GrpcServer

SERVICE = "probe.Probe"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass
class ProbeLog:
    """What the handlers saw, for the tests to check."""

    cancelled: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    produced: int = 0
    metadata: list[tuple[str, Any]] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)


def probe_handlers(log: ProbeLog) -> dict[str, grpc.RpcMethodHandler]:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes | None:
        log.metadata = list(context.invocation_metadata())
        if request == b"abort":
            await context.abort(
                grpc.StatusCode.NOT_FOUND, "no such thing", (("why-bin", b"\x00\xff"),)
            )
        if request == b"set-code":
            context.set_code(grpc.StatusCode.FAILED_PRECONDITION)
            context.set_details("not now")
            return None
        if request == b"raise":
            raise ValueError("a bug")
        if request == b"bad-metadata":  # a header only HTTP/2 itself may send
            context.set_trailing_metadata((("connection", "close"),))
        if request == b"slow":
            log.started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                log.cancelled.put_nowait("echo")
                raise
        return request

    async def count(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """b"N": the numbers 0..N-1; b"N*SIZE": N messages of SIZE bytes."""
        number, _, size = request.partition(b"*")
        for index in range(int(number)):
            log.produced = index + 1
            yield b"%d" % index if not size else bytes(int(size))

    async def forever(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        yield b"first"
        log.started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            log.cancelled.put_nowait("forever")
        yield b"never"

    async def chat(
        requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        async for request in requests:
            yield b"echo:" + request
        yield b"end"

    async def total(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
        return b"+".join([request async for request in requests])

    return {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Count": grpc.unary_stream_rpc_method_handler(count),
        "Forever": grpc.unary_stream_rpc_method_handler(forever),
        "Chat": grpc.stream_stream_rpc_method_handler(chat),
        "Total": grpc.stream_unary_rpc_method_handler(total),
    }


async def start_probe(
    socket_path: Path, log: ProbeLog, *, keepalive_time_s: float = 30.0, **limits: Any
) -> GrpcServer:
    """A probe server; ``limits`` replace TransportSettings' defaults."""
    server = GrpcServer(
        TransportSettings(
            max_message_bytes=MAX_MESSAGE_BYTES,
            keepalive_time_s=keepalive_time_s,
            keepalive_timeout_s=keepalive_time_s,
            limits=GrpcSettings(**limits),
        )
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, probe_handlers(log)),)
    )
    server.bind_unix(socket_path)
    await server.start()
    return server


def probe_channel(socket_path: Path) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        f"unix:{socket_path}",
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.use_local_subchannel_pool", 1),
        ],
    )


def method(channel: grpc.aio.Channel, name: str) -> Any:
    """A raw-bytes multicallable of the probe service."""
    path = f"/{SERVICE}/{name}"
    kinds = {
        "Echo": channel.unary_unary,
        "Count": channel.unary_stream,
        "Forever": channel.unary_stream,
        "Chat": channel.stream_stream,
        "Total": channel.stream_unary,
    }
    return kinds[name](path)


class RawClient:
    """An HTTP/2 client with nothing of gRPC: it sends exactly what a test asks."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))

    @classmethod
    async def connect(cls, place: Path | tuple[str, int]) -> RawClient:
        """Connects to a Unix socket path or a (host, TCP port) and sends the preface."""
        if isinstance(place, Path):
            client = cls(*await asyncio.open_unix_connection(place))
        else:
            client = cls(*await asyncio.open_connection(*place))
        client.h2.initiate_connection()
        await client.flush()
        return client

    async def flush(self) -> None:
        self.writer.write(self.h2.data_to_send())
        await self.writer.drain()

    def open_stream(
        self, name: str = "Echo", method_name: str = "POST", content_type: str = "application/grpc"
    ) -> int:
        """Sends a request's headers (not ending the stream); returns its stream id."""
        stream_id: int = self.h2.get_next_available_stream_id()
        headers = [
            (":method", method_name),
            (":scheme", "http"),
            (":path", f"/{SERVICE}/{name}"),
            (":authority", "localhost"),
            ("content-type", content_type),
            ("te", "trailers"),
        ]
        self.h2.send_headers(stream_id, headers)
        return stream_id

    async def request(self, method_name: str, content_type: str) -> list[h2.events.Event]:
        stream_id = self.open_stream(method_name=method_name, content_type=content_type)
        self.h2.end_stream(stream_id)
        await self.flush()
        return await self.events_until(
            lambda events: any(isinstance(e, h2.events.StreamEnded) for e in events)
        )

    async def events_until(
        self, done: Callable[[list[h2.events.Event]], bool], *, within: float = 10
    ) -> list[h2.events.Event]:
        """Reads (answering what h2 answers by itself) until ``done(events so far)``; raises
        EOFError if the server hangs up first."""
        events: list[h2.events.Event] = []
        async with asyncio.timeout(within):
            while not done(events):
                data = await self.reader.read(65536)
                if not data:
                    raise EOFError(f"the server hung up after {len(events)} events: {events[-3:]}")
                events += self.h2.receive_data(data)
                # Written without waiting for the socket: this client may have sent more than
                # the server is reading until it reads the server's answers.
                self.writer.write(self.h2.data_to_send())
        return events

    async def goaway(self, *, within: float = 10) -> h2.events.ConnectionTerminated:
        """The server's GOAWAY, read (and everything before it) within ``within`` seconds."""
        events = await self.events_until(
            lambda events: any(isinstance(e, h2.events.ConnectionTerminated) for e in events),
            within=within,
        )
        return next(e for e in events if isinstance(e, h2.events.ConnectionTerminated))

    def close(self) -> None:
        self.writer.close()


def grpc_message(payload: bytes, *, announced: int | None = None) -> bytes:
    """A length-prefixed gRPC message (``announced``: the length its prefix claims)."""
    size = len(payload) if announced is None else announced
    return b"\x00" + size.to_bytes(4, "big") + payload
