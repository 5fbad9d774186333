"""BetCode's HTTP/2 gRPC transport driven by grpc.aio clients (another implementation of the
protocol): every call shape, every way a call ends, flow control and shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from http2_probe import ProbeLog, method, probe_channel, start_probe

from betcode.server.http2.server import GrpcServer


@pytest.fixture
def log() -> ProbeLog:
    return ProbeLog()


@pytest.fixture
async def probe(socket_path: Path, log: ProbeLog) -> AsyncIterator[GrpcServer]:
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    server = await start_probe(socket_path, log)
    yield server
    await server.stop(grace=0)


@pytest.fixture
async def channel(probe: GrpcServer, socket_path: Path) -> AsyncIterator[grpc.aio.Channel]:
    async with probe_channel(socket_path) as chan:
        yield chan


async def test_unary_call_round_trip_with_metadata(
    channel: grpc.aio.Channel, log: ProbeLog
) -> None:
    answer = await method(channel, "Echo")(b"hello", metadata=(("x-client-id", "c1"),))
    assert answer == b"hello"
    assert ("x-client-id", "c1") in log.metadata


async def test_ten_mib_messages_travel_both_ways(channel: grpc.aio.Channel) -> None:
    payload = bytes(range(256)) * (10 * 4096)
    assert await method(channel, "Echo")(payload) == payload


async def test_a_server_stream_arrives_whole_and_in_order(channel: grpc.aio.Channel) -> None:
    received = [message async for message in method(channel, "Count")(b"20000")]
    assert received == [b"%d" % index for index in range(20000)]


async def test_bidirectional_and_client_streaming_calls(channel: grpc.aio.Channel) -> None:
    call = method(channel, "Chat")()
    await call.write(b"a")
    assert await call.read() == b"echo:a"
    await call.write(b"b")
    await call.done_writing()
    assert [await call.read(), await call.read()] == [b"echo:b", b"end"]
    assert await call.read() is grpc.aio.EOF

    async def parts() -> AsyncIterator[bytes]:
        for part in (b"1", b"2", b"3"):
            yield part

    assert await method(channel, "Total")(parts()) == b"1+2+3"


async def test_headers_arrive_before_the_client_sends_anything(
    channel: grpc.aio.Channel,
) -> None:
    """A client that waits for the response headers before writing (tonic does) is not left
    waiting by a bidirectional handler that waits for its first request."""
    call = method(channel, "Chat")()
    async with asyncio.timeout(5):
        await call.initial_metadata()
    call.cancel()


async def test_abort_sends_code_details_and_binary_trailing_metadata(
    channel: grpc.aio.Channel,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await method(channel, "Echo")(b"abort")
    assert failure.value.code() == grpc.StatusCode.NOT_FOUND
    assert failure.value.details() == "no such thing"
    assert ("why-bin", b"\x00\xff") in tuple(failure.value.trailing_metadata())


async def test_set_code_without_a_response_is_the_status(channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await method(channel, "Echo")(b"set-code")
    assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert failure.value.details() == "not now"


async def test_a_failing_handler_is_unknown_and_the_connection_serves_on(
    channel: grpc.aio.Channel,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await method(channel, "Echo")(b"raise")
    assert failure.value.code() == grpc.StatusCode.UNKNOWN
    assert "a bug" in (failure.value.details() or "")
    assert await method(channel, "Echo")(b"still here") == b"still here"


async def test_an_unknown_method_is_unimplemented(channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await channel.unary_unary("/probe.Probe/Nope")(b"")
    assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_deadline_cancels_the_handler(channel: grpc.aio.Channel, log: ProbeLog) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await method(channel, "Echo")(b"slow", timeout=0.3)
    assert failure.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert await asyncio.wait_for(log.cancelled.get(), 5) == "echo"


async def test_a_client_that_cancels_ends_the_handler(
    channel: grpc.aio.Channel, log: ProbeLog
) -> None:
    call = method(channel, "Forever")(b"")
    assert await call.read() == b"first"
    await log.started.wait()
    call.cancel()
    assert await asyncio.wait_for(log.cancelled.get(), 5) == "forever"


async def test_an_oversized_request_is_refused_and_the_connection_serves_on(
    probe: GrpcServer, socket_path: Path
) -> None:
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    async with grpc.aio.insecure_channel(f"unix:{socket_path}", options=options) as chan:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await chan.unary_unary("/probe.Probe/Echo")(b"x" * (17 * 1024 * 1024))
        assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await chan.unary_unary("/probe.Probe/Echo")(b"ok") == b"ok"


async def test_gzip_compressed_requests_are_accepted(channel: grpc.aio.Channel) -> None:
    answer = await method(channel, "Echo")(b"squeezed" * 1000, compression=grpc.Compression.Gzip)
    assert answer == b"squeezed" * 1000


async def test_a_client_that_stops_reading_holds_the_handler_back(
    channel: grpc.aio.Channel, log: ProbeLog
) -> None:
    """Flow control reaches the handler: it is suspended once the client's window and the
    call's buffer are full, instead of queueing everything in memory."""
    total = 40_000  # 100 MB of 2.5 KB messages
    call = method(channel, "Count")(b"%d*2500" % total)
    assert await call.read() == bytes(2500)
    await asyncio.sleep(0.5)
    held_back = log.produced
    assert held_back < 10_000
    received = 1
    while await call.read() is not grpc.aio.EOF:
        received += 1
    assert received == total


async def test_stop_lets_calls_finish_within_grace_then_ends_the_rest(
    probe: GrpcServer, channel: grpc.aio.Channel, log: ProbeLog
) -> None:
    forever = method(channel, "Forever")(b"")
    assert await forever.read() == b"first"
    chat = method(channel, "Chat")()
    await chat.write(b"a")
    assert await chat.read() == b"echo:a"
    stopping = asyncio.create_task(probe.stop(grace=1.0))
    await chat.write(b"b")  # a call in flight goes on during the grace period ...
    await chat.done_writing()
    assert [await chat.read(), await chat.read()] == [b"echo:b", b"end"]
    assert await chat.code() == grpc.StatusCode.OK
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await forever.read()  # ... and one still running after it is ended
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
    assert failure.value.details() == "the daemon is shutting down"
    await stopping
    assert log.cancelled.get_nowait() == "forever"


async def test_oversized_metadata_closes_only_that_connection(
    probe: GrpcServer, socket_path: Path, channel: grpc.aio.Channel
) -> None:
    async with probe_channel(socket_path) as other:
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # above the 16 KiB we announce
            await method(other, "Echo")(b"x", metadata=(("x-huge", "y" * 20_000),))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert await method(channel, "Echo")(b"unaffected") == b"unaffected"


async def test_metadata_http2_reserves_is_left_out_and_the_connection_goes_on(
    channel: grpc.aio.Channel,
) -> None:
    call = method(channel, "Echo")(b"bad-metadata")
    assert await call == b"bad-metadata"
    assert ("connection", "close") not in list(await call.trailing_metadata())
    assert await method(channel, "Echo")(b"next") == b"next"  # the client's HPACK in step
