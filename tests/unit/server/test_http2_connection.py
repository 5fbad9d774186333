"""BetCode's HTTP/2 transport at the protocol level: a raw h2 client on a real socket sends what
no gRPC library would (garbage, wrong methods, silence) and the server stays healthy."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import h2.events
import pytest
from http2_probe import ProbeLog, RawClient, method, probe_channel, start_probe

from betcode.server.http2.server import GrpcServer

KEEPALIVE_S = 0.3


@pytest.fixture
async def probe(socket_path: Path) -> AsyncIterator[GrpcServer]:
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    server = await start_probe(socket_path, ProbeLog(), keepalive_time_s=KEEPALIVE_S)
    yield server
    await server.stop(grace=0)


def status_of(events: list[h2.events.Event]) -> dict[bytes, bytes]:
    return {
        bytes(name): bytes(value)
        for event in events
        if isinstance(event, h2.events.ResponseReceived)
        for name, value in event.headers
    }


async def test_garbage_closes_that_connection_only(probe: GrpcServer, socket_path: Path) -> None:
    reader, writer = await asyncio.open_unix_connection(socket_path)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 100)
    async with asyncio.timeout(5):
        while await reader.read(65536):
            pass  # read until the server hangs up
    writer.close()
    async with probe_channel(socket_path) as channel:
        assert await method(channel, "Echo")(b"alive") == b"alive"


@pytest.mark.parametrize(
    ("method_name", "content_type", "status"),
    [("GET", "application/grpc", b"405"), ("POST", "text/plain", b"415")],
)
async def test_requests_that_are_not_grpc_get_an_http_status(
    probe: GrpcServer, socket_path: Path, method_name: str, content_type: str, status: bytes
) -> None:
    client = await RawClient.connect(socket_path)
    events = await client.request(method_name, content_type)
    assert status_of(events)[b":status"] == status
    client.writer.close()


async def test_a_client_that_stops_answering_pings_is_dropped(
    probe: GrpcServer, socket_path: Path
) -> None:
    client = await RawClient.connect(socket_path)
    # Never feeds what it reads to h2, so never acknowledges the server's keepalive PING.
    async with asyncio.timeout(KEEPALIVE_S * 2 + 5):
        while await client.reader.read(65536):
            pass
    client.writer.close()


async def test_a_client_that_answers_pings_is_kept(probe: GrpcServer, socket_path: Path) -> None:
    client = await RawClient.connect(socket_path)
    pings = await answered_pings(client, seconds=KEEPALIVE_S * 6)
    assert pings >= 2  # still connected after several keepalive rounds
    client.writer.close()


async def answered_pings(client: RawClient, *, seconds: float) -> int:
    """Reads (h2 acknowledges each PING by itself) for ``seconds``; how many PINGs came."""
    pings = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while data := await client.reader.read(65536):
                events = client.h2.receive_data(data)
                pings += sum(isinstance(e, h2.events.PingReceived) for e in events)
                await client.flush()
    return pings
