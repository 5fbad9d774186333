"""A real BetCode gRPC server on a real Unix socket, and a client channel for it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from server_harness import connect, make_daemon

from betcode.server.app import DaemonServer


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: pytest's tmp_path can exceed a socket address's 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="bc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def socket_path(short_dir: Path) -> Path:
    return short_dir / "run" / "betcode" / "daemon.sock"


@pytest.fixture
async def daemon(socket_path: Path) -> AsyncIterator[DaemonServer]:
    server = make_daemon()
    await server.start(socket_path)
    yield server
    await server.stop(grace_s=0)


@pytest.fixture
async def channel(daemon: DaemonServer) -> AsyncIterator[grpc.aio.Channel]:
    async with connect(f"unix:{daemon.socket_path}") as chan:
        yield chan
