"""A real daemon (pinned real CLI, offline mock model) serving its Unix socket and a loopback
TCP port, for tests that talk to it only through the generated betcode.v1 stubs, as a client
written in another language from the same .proto files would. Every test runs against both
gRPC servers the daemon can use (`daemon.grpc.server`): BetCode's own transport and grpcio's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import grpc.aio
import pytest
from harness.daemon import daemon_config
from harness.environment import Workspace
from stub_calls import Served

from betcode.config.settings import GRPC_SERVERS, DaemonSettings, GrpcSettings
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.server.grpcio_server import GrpcioServer
from betcode.server.http2.server import GrpcServer

pytestmark = pytest.mark.real_cli


SERVER_CLASSES = {"betcode": GrpcServer, "grpcio": GrpcioServer}


@pytest.fixture(params=GRPC_SERVERS)
def grpc_server(request: pytest.FixtureRequest) -> str:
    """Which gRPC server the daemon runs on (`daemon.grpc.server`)."""
    return str(request.param)


@pytest.fixture
async def served(
    tmp_path: Path,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    grpc_server: str,
) -> AsyncIterator[Served]:
    config = daemon_config(
        tmp_path / "daemon",
        claude_bin,
        workspace.env(mock_api.base_url),
        listen="127.0.0.1:0",
        settings=replace(DaemonSettings(), grpc=GrpcSettings(server=grpc_server)),
    )
    daemon = Daemon(config)
    await daemon.start()
    try:
        assert daemon.server is not None
        assert isinstance(daemon.server.grpc_server, SERVER_CLASSES[grpc_server])
        assert daemon.server.tcp_port
        yield Served(
            unix=f"unix:{config.socket_path}",
            tcp=f"127.0.0.1:{daemon.server.tcp_port}",
            project=workspace.repo,
        )
    finally:
        await daemon.stop()


@pytest.fixture(params=["unix", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def channel(served: Served, transport: str) -> AsyncIterator[grpc.aio.Channel]:
    """A plain channel: no BetCode client code, no options beyond the defaults."""
    async with grpc.aio.insecure_channel(served.address(transport)) as opened:
        yield opened
