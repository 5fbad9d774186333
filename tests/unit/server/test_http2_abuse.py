"""BetCode's HTTP/2 transport under abuse: a raw h2 client on the daemon's socket does what
mature servers bound (floods of PINGs, resets, streams, partial messages, connections; a preface
or a header block never finished), and each time the daemon's memory stays bounded, the abusive
connection is ended or throttled, and a well-behaved client on another connection is served."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import h2.errors
import h2.events
import h2.exceptions
import pytest
from http2_probe import ProbeLog, RawClient, grpc_message, method, probe_channel, start_probe
from hyperframe.frame import PingFrame, SettingsFrame

from betcode.server.http2.server import GrpcServer

ServerFactory = Callable[..., Awaitable[GrpcServer]]


@pytest.fixture
async def serve(socket_path: Path) -> AsyncIterator[ServerFactory]:
    """Starts the probe server with the given limits (at most one per test)."""
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    servers: list[GrpcServer] = []

    async def start(**limits: Any) -> GrpcServer:
        servers.append(await start_probe(socket_path, ProbeLog(), **limits))
        return servers[-1]

    yield start
    for server in servers:
        await server.stop(grace=0)


@pytest.fixture
async def good_client(socket_path: Path) -> AsyncIterator[grpc.aio.Channel]:
    """A well-behaved gRPC client on a connection of its own."""
    async with probe_channel(socket_path) as channel:
        yield channel


async def served(channel: grpc.aio.Channel) -> None:
    """The well-behaved client is answered (within 5 s)."""
    assert await method(channel, "Echo")(b"still served", timeout=5) == b"still served"


def unsent_bytes(server: GrpcServer) -> int:
    return sum(connection.unsent_bytes for connection in server.connections)


async def until_stalled(writer: asyncio.StreamWriter, *, quiet: float = 1.0) -> None:
    """Waits until everything ``writer`` holds is sent, or nothing more leaves for ``quiet``
    seconds (the server stopped reading)."""
    transport = writer.transport
    last, still_since = -1, asyncio.get_running_loop().time()
    async with asyncio.timeout(60):
        while (left := transport.get_write_buffer_size()) > 0:
            now = asyncio.get_running_loop().time()
            if left != last:
                last, still_since = left, now
            elif now - still_since >= quiet:
                return
            await asyncio.sleep(0.05)


async def test_a_ping_flood_from_a_client_that_never_reads_is_held_at_the_high_water_mark(
    serve: ServerFactory, socket_path: Path, good_client: grpc.aio.Channel
) -> None:
    # With no PING budget, only backpressure holds the answers back: reading stops while the
    # unsent PING ACKs are above the high-water mark.
    server = await serve(max_pings_per_window=10**9)
    await served(good_client)
    client = await RawClient.connect(socket_path)
    ping = PingFrame(0, opaque_data=b"12345678").serialize()
    pings = 150_000  # 2.5 MB of input, 2.5 MB of PING ACKs if all were answered
    for _ in range(30):
        client.writer.write(ping * (pings // 30))  # never reads
    await until_stalled(client.writer)
    assert unsent_bytes(server) < 1024 * 1024
    await served(good_client)
    # Once the client reads, the server reads again: the rest of the flood, then a call.
    stream_id = client.open_stream()
    client.h2.send_data(stream_id, grpc_message(b"after the flood"), end_stream=True)
    client.writer.write(client.h2.data_to_send())
    events = await client.events_until(
        lambda events: any(isinstance(e, h2.events.StreamEnded) for e in events), within=60
    )
    assert sum(isinstance(e, h2.events.PingAckReceived) for e in events) == pings
    answer = [bytes(e.data) for e in events if isinstance(e, h2.events.DataReceived)]
    assert answer == [grpc_message(b"after the flood")]
    client.close()


@pytest.mark.parametrize("frame", ["PING", "SETTINGS"])
async def test_a_ping_or_settings_flood_gets_goaway_enhance_your_calm(
    serve: ServerFactory, socket_path: Path, good_client: grpc.aio.Channel, frame: str
) -> None:
    await serve()
    client = await RawClient.connect(socket_path)
    for _ in range(5000):
        if frame == "PING":
            client.h2.ping(b"12345678")
        else:
            client.writer.write(
                SettingsFrame(0, settings={SettingsFrame.ENABLE_PUSH: 0}).serialize()
            )
    await client.flush()
    goaway = await client.goaway()
    assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    await served(good_client)
    client.close()


async def test_one_stream_over_the_limit_is_refused_alone_and_the_others_answered(
    serve: ServerFactory, socket_path: Path, good_client: grpc.aio.Channel
) -> None:
    await serve(max_concurrent_streams=10)
    client = await RawClient.connect(socket_path)
    # Sent before the server's SETTINGS are read, so the client's h2 does not hold back.
    streams = [client.open_stream() for _ in range(11)]
    await client.flush()
    events = await client.events_until(
        lambda events: any(isinstance(e, h2.events.StreamReset) for e in events)
    )
    resets = [e for e in events if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in resets] == [
        (streams[-1], h2.errors.ErrorCodes.REFUSED_STREAM)
    ]
    for index, stream_id in enumerate(streams[:-1]):
        client.h2.send_data(stream_id, grpc_message(b"call %d" % index), end_stream=True)
    await client.flush()
    events += await client.events_until(
        lambda events: sum(isinstance(e, h2.events.StreamEnded) for e in events) == 10
    )
    answers = {
        e.stream_id: bytes(e.data)[5:] for e in events if isinstance(e, h2.events.DataReceived)
    }
    assert answers == {stream_id: b"call %d" % i for i, stream_id in enumerate(streams[:-1])}
    await served(good_client)
    client.close()


async def test_rapid_reset_gets_goaway_enhance_your_calm(
    serve: ServerFactory, socket_path: Path, good_client: grpc.aio.Channel
) -> None:
    await serve()
    client = await RawClient.connect(socket_path)

    async def flood() -> None:
        for _ in range(20):
            for _ in range(1000):  # HEADERS + RST_STREAM, the CVE-2023-44487 pattern
                stream_id = client.open_stream()
                client.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            await client.flush()

    flooding = asyncio.create_task(flood())
    goaway = await client.goaway()
    flooding.cancel()
    with contextlib.suppress(asyncio.CancelledError, ConnectionError, h2.exceptions.ProtocolError):
        await flooding
    assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    await served(good_client)
    client.close()


async def test_a_flood_of_partial_messages_ends_that_connection(
    serve: ServerFactory, socket_path: Path, good_client: grpc.aio.Channel
) -> None:
    await serve(connection_buffer_bytes=4 * 1024 * 1024)
    client = await RawClient.connect(socket_path)
    await client.events_until(  # the server's SETTINGS: larger windows
        lambda events: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in events)
    )
    chunk = bytes(16 * 1024)
    goaway = None
    with contextlib.suppress(EOFError, ConnectionError):
        for _ in range(10):  # each stream announces a 16 MiB message and sends 900 KiB of it
            stream_id = client.open_stream()
            client.h2.send_data(stream_id, grpc_message(b"", announced=16 * 1024 * 1024))
            for _ in range(56):
                client.h2.send_data(stream_id, chunk)
            await client.flush()
        goaway = await client.goaway()
    assert goaway is not None
    assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    await served(good_client)
    client.close()


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(b"PRI * HTTP/2.0\r\n", id="half a preface"),
        pytest.param(None, id="a header block never ended"),
    ],
)
async def test_a_connection_that_stalls_in_its_preface_or_headers_is_closed(
    serve: ServerFactory, socket_path: Path, good_client: grpc.aio.Channel, sent: bytes | None
) -> None:
    await serve(frame_timeout_seconds=0.5)
    reader, writer = await asyncio.open_unix_connection(socket_path)
    if sent is None:
        client = RawClient(reader, writer)
        client.h2.initiate_connection()
        client.open_stream()  # one HEADERS frame
        sent = _without_end_headers(client.h2.data_to_send())
    writer.write(sent)
    started = asyncio.get_running_loop().time()
    async with asyncio.timeout(10):
        while await reader.read(65536):
            pass  # until the server hangs up
    assert asyncio.get_running_loop().time() - started >= 0.4
    await served(good_client)
    writer.close()


def _without_end_headers(data: bytes) -> bytes:
    """``data`` (preface and frames) with the END_HEADERS flag of its HEADERS frame cleared."""
    out = bytearray(data)
    position = len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    while position < len(out):
        length = int.from_bytes(out[position : position + 3], "big")
        if out[position + 3] == 0x1:  # HEADERS
            out[position + 4] &= ~0x4
        position += 9 + length
    return bytes(out)


async def test_a_connection_flood_is_capped(
    serve: ServerFactory, socket_path: Path, good_client: grpc.aio.Channel
) -> None:
    server = await serve(max_connections=8)
    await served(good_client)  # connected before the flood
    clients = [await RawClient.connect(socket_path) for _ in range(20)]
    refused = 0
    for client in clients:
        # Refused: GOAWAY (ENHANCE_YOUR_CALM) and closed, or closed before the client's
        # preface got there (the client's write then fails).
        try:
            goaway = await client.goaway(within=1)
        except TimeoutError:
            continue  # taken up
        except (EOFError, ConnectionError):
            refused += 1
            continue
        assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        refused += 1
    assert refused == 13  # 8 in all: the good client's connection and 7 of these
    assert len(server.connections) == 8
    await served(good_client)
    for client in clients:
        client.close()


async def test_an_idle_connection_is_closed_and_one_with_a_call_is_kept(
    serve: ServerFactory, socket_path: Path
) -> None:
    await serve(idle_timeout_seconds=0.5)
    idle = await RawClient.connect(socket_path)
    busy = await RawClient.connect(socket_path)
    stream_id = busy.open_stream("Forever")
    busy.h2.send_data(stream_id, grpc_message(b""), end_stream=True)
    await busy.flush()
    goaway = await idle.goaway(within=5)
    assert goaway.error_code == h2.errors.ErrorCodes.NO_ERROR
    with pytest.raises(TimeoutError):
        await busy.goaway(within=1.5)
    idle.close()
    busy.close()


async def test_a_client_goaway_with_calls_open_stops_them_and_closes(
    serve: ServerFactory, socket_path: Path, good_client: grpc.aio.Channel
) -> None:
    await serve()
    client = await RawClient.connect(socket_path)
    stream_id = client.open_stream("Count")
    client.h2.send_data(stream_id, grpc_message(b"1000000"), end_stream=True)
    await client.flush()
    await client.events_until(
        lambda events: any(isinstance(e, h2.events.DataReceived) for e in events)
    )
    client.h2.close_connection()  # GOAWAY while the stream still runs
    await client.flush()
    async with asyncio.timeout(5):
        while await client.reader.read(65536):
            pass  # the server hangs up
    await served(good_client)
    client.close()


async def test_a_busy_upload_whose_reads_end_inside_frames_is_no_stall(
    serve: ServerFactory, socket_path: Path
) -> None:
    await serve(frame_timeout_seconds=0.5)
    client = await RawClient.connect(socket_path)
    stream_id = client.open_stream("Total")
    for _ in range(400):
        client.h2.send_data(stream_id, grpc_message(b"x" * 100))
    client.h2.end_stream(stream_id)
    data = client.h2.data_to_send()
    # 701-byte pieces every 20 ms for over a second: frames complete all the time, yet nearly
    # every read the server makes ends inside one.
    for start in range(0, len(data), 701):
        client.writer.write(data[start : start + 701])
        await asyncio.sleep(0.02)
    events = await client.events_until(
        lambda events: any(isinstance(e, h2.events.StreamEnded) for e in events)
    )
    answer = b"".join(bytes(e.data) for e in events if isinstance(e, h2.events.DataReceived))
    assert answer == grpc_message(b"+".join([b"x" * 100] * 400))
    client.close()
