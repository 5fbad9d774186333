"""Asking the daemon serving a socket who it is and how it is (`daemon status|stop|start`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import click
import grpc

from betcode.daemon_socket import socket_holder_pid
from betcode.v1 import health_pb2, health_pb2_grpc, version_pb2

STATUS_NAMES = {
    health_pb2.SERVING: "serving",
    health_pb2.NOT_SERVING: "NOT SERVING",
    health_pb2.UNKNOWN: "unknown",
    health_pb2.SERVICE_UNKNOWN: "unknown service",
}


async def fetch_health(socket: Path) -> health_pb2.HealthDetailsResponse:
    async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
        stub = health_pb2_grpc.BetCodeHealthStub(channel)
        response: health_pb2.HealthDetailsResponse = await stub.GetHealthDetails(
            health_pb2.HealthDetailsRequest(), timeout=5
        )
        return response


def ask_health(socket: Path) -> health_pb2.HealthDetailsResponse | None:
    """The health details of the daemon serving ``socket``, or None when none answers."""
    try:
        return asyncio.run(fetch_health(socket))
    except grpc.RpcError:
        return None


def print_health(details: health_pb2.HealthDetailsResponse) -> None:
    overall = STATUS_NAMES.get(details.overall_status, str(details.overall_status))
    degraded = f" (degraded: {details.degraded_reason})" if details.degraded else ""
    click.echo(f"overall: {overall}{degraded}")
    for component in details.components:
        name = STATUS_NAMES.get(component.status, str(component.status))
        click.echo(f"  {component.name}: {name} — {component.message}")
    if details.HasField("claude_code"):
        claude = details.claude_code
        level = version_pb2.CompatibilityLevel.Name(claude.compatibility)
        click.echo(
            f"  claude: {claude.version} ({level}) at {claude.binary_path} [{claude.binary_source}]"
        )


@dataclass(frozen=True, slots=True)
class RunningDaemon:
    pid: int
    # Its answer over the socket; None while it holds the socket's lock without answering.
    health: health_pb2.HealthDetailsResponse | None

    @property
    def answering(self) -> bool:
        return self.health is not None


def find_daemon(socket: Path) -> RunningDaemon | None:
    """The daemon serving ``socket``, told by that daemon itself over the socket (its pid is in
    its health answer), else by the lock on the socket, which only a live process holds.
    Nothing shared with other daemons (such as a file in the data dir) is trusted."""
    health = ask_health(socket)
    if health is not None and health.metadata.get("pid", "").isdigit():
        return RunningDaemon(int(health.metadata["pid"]), health)
    pid = socket_holder_pid(socket)
    return RunningDaemon(pid, None) if pid is not None else None
