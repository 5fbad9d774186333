"""A real BetCode gRPC server on a real Unix socket, and clients for it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import grpc
import pytest

from betcode.server.app import DEFAULT_MAX_MESSAGE_BYTES, DaemonServer, RpcService
from betcode.server.claude_status import ClaudeCodeReport
from betcode.server.health import HealthMonitor
from betcode.server.version_service import ServerCapabilities, VersionService
from betcode.v1 import version_pb2

CLAUDE = ClaudeCodeReport(
    binary_path="/opt/claude/bin/claude",
    binary_source="pinned",
    version="2.1.330",
    api_version="",
    compatibility=version_pb2.FULLY_COMPATIBLE,
)
CAPABILITIES = ServerCapabilities(
    server_version="0.1.0",
    feature_flags={"streaming_deltas": True, "batched_stream": True, "worktree_management": False},
    max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES,
)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: pytest's tmp_path can exceed a socket address's 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="bc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def socket_path(short_dir: Path) -> Path:
    return short_dir / "run" / "betcode" / "daemon.sock"


def make_daemon(
    health: HealthMonitor | None = None, services: Sequence[RpcService] = ()
) -> DaemonServer:
    monitor = health or HealthMonitor(server_version="0.1.0", claude_code=lambda: CLAUDE)
    version = VersionService(CAPABILITIES, lambda: CLAUDE)
    return DaemonServer(health=monitor, version=version, services=services)


def connect(target: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.max_receive_message_length", DEFAULT_MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", DEFAULT_MAX_MESSAGE_BYTES),
            ("grpc.use_local_subchannel_pool", 1),
        ],
    )


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
