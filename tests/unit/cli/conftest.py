"""The fake AgentService on a real Unix socket, and a DaemonClient connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc.aio
import pytest
from chat_fake_daemon import FakeAgentService, serve

from betcode.cli.connection import DaemonAddress, DaemonClient


@pytest.fixture
def socket_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A short directory: a socket address holds at most 107 bytes.
    return tmp_path_factory.mktemp("s") / "daemon.sock"


@pytest.fixture
def fake() -> FakeAgentService:
    # The generated servicer stub declares every RPC abstract; at run time the base class
    # answers UNIMPLEMENTED for those the fake leaves out.
    return FakeAgentService()  # type: ignore[abstract]


@pytest.fixture
async def server(fake: FakeAgentService, socket_path: Path) -> AsyncIterator[grpc.aio.Server]:
    server = await serve(fake, socket_path)
    yield server
    await server.stop(grace=0)


@pytest.fixture
async def client(server: grpc.aio.Server, socket_path: Path) -> AsyncIterator[DaemonClient]:
    client = await DaemonClient.connect(DaemonAddress(socket_path, "test"), client_id="cli-me")
    yield client
    await client.close()
