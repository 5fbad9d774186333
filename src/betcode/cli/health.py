"""Printing the daemon's health details (used by `daemon status` and `doctor`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
import grpc

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
