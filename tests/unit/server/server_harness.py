"""Shared pieces of the server tests: a daemon with test capabilities, and a client channel."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from betcode.config.settings import GrpcSettings
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


def make_daemon(
    health: HealthMonitor | None = None,
    services: Sequence[RpcService] = (),
    limits: GrpcSettings | None = None,
) -> DaemonServer:
    monitor = health or HealthMonitor(server_version="0.1.0", claude_code=lambda: CLAUDE)
    version = VersionService(CAPABILITIES, lambda: CLAUDE)
    return DaemonServer(health=monitor, version=version, services=services, limits=limits)


def connect(target: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.max_receive_message_length", DEFAULT_MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", DEFAULT_MAX_MESSAGE_BYTES),
            ("grpc.use_local_subchannel_pool", 1),
        ],
    )
