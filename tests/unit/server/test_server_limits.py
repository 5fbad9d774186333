"""The daemon's gRPC server takes its transport and limits from `daemon.grpc` (GrpcSettings):
the server it runs on, and the limits that server enforces."""

from __future__ import annotations

from pathlib import Path

import h2.errors
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from http2_probe import RawClient
from server_harness import connect, make_daemon

from betcode.config.settings import GrpcSettings
from betcode.server.grpcio_server import GrpcioServer
from betcode.server.http2.server import GrpcServer

SERVING = health_pb2.HealthCheckResponse.SERVING


async def health_of(socket_path: Path) -> int:
    async with connect(f"unix:{socket_path}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        return int(answer.status)


@pytest.mark.parametrize(("server", "kind"), [("betcode", GrpcServer), ("grpcio", GrpcioServer)])
async def test_the_server_is_the_one_the_setting_names(
    socket_path: Path, server: str, kind: type
) -> None:
    daemon = make_daemon(limits=GrpcSettings(server=server))
    await daemon.start(socket_path)
    try:
        assert isinstance(daemon.grpc_server, kind)
        assert await health_of(socket_path) == SERVING
    finally:
        await daemon.stop(grace_s=0)


async def test_the_connection_cap_comes_from_the_settings(socket_path: Path) -> None:
    daemon = make_daemon(limits=GrpcSettings(max_connections=1))
    await daemon.start(socket_path)
    try:
        kept = await RawClient.connect(socket_path)
        refused = await RawClient.connect(socket_path)
        try:
            goaway = await refused.goaway(within=5)
            assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        except (EOFError, ConnectionError):
            pass  # closed before its preface got there
        else:
            assert goaway.last_stream_id == 0
        kept.close()
        refused.close()
    finally:
        await daemon.stop(grace_s=0)


async def test_rapid_reset_over_loopback_tcp_gets_goaway_and_the_socket_is_served(
    socket_path: Path,
) -> None:
    daemon = make_daemon()
    await daemon.start(socket_path, listen="127.0.0.1:0")
    try:
        assert daemon.tcp_port is not None
        client = await RawClient.connect(("127.0.0.1", daemon.tcp_port))
        stream_id = 0
        # HEADERS + RST_STREAM pairs, more than one window's budget, on a path the daemon does
        # not serve: h2 has taken a stream's reset before the daemon answers its HEADERS.
        for _ in range(1500):
            stream_id = client.open_stream()
            client.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        await client.flush()
        goaway = await client.goaway()
        assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert goaway.last_stream_id is not None
        assert goaway.last_stream_id < stream_id  # the streams after it were never taken up
        assert await health_of(socket_path) == SERVING
        client.close()
    finally:
        await daemon.stop(grace_s=0)
