"""Health over a real socket: grpc.health.v1.Health, betcode.v1.Health, BetCodeHealth."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2 as std_pb2
from grpc_health.v1 import health_pb2_grpc as std_grpc
from server_harness import CLAUDE, connect, make_daemon

from betcode.server.app import DaemonServer
from betcode.server.health import ComponentReport, HealthMonitor, StatusBoard
from betcode.v1 import health_pb2, health_pb2_grpc, version_pb2

SERVING, NOT_SERVING = health_pb2.SERVING, health_pb2.NOT_SERVING


class Switch:
    """A component check whose answer the test flips."""

    def __init__(self, report: ComponentReport) -> None:
        self.report = report

    def __call__(self) -> ComponentReport:
        return self.report


def _failing_check() -> ComponentReport:
    raise OSError("database is locked")


@pytest.fixture
def storage() -> Switch:
    return Switch(ComponentReport(True, "last write 1 s ago"))


@pytest.fixture
async def monitored(socket_path: Path, storage: Switch) -> AsyncIterator[DaemonServer]:
    health = HealthMonitor(server_version="0.1.0", claude_code=lambda: CLAUDE)
    health.add_component("sqlite", storage, critical=True)
    server = make_daemon(health)
    await server.start(socket_path)
    yield server
    await server.stop(grace_s=0)


@pytest.fixture
async def chan(monitored: DaemonServer) -> AsyncIterator[grpc.aio.Channel]:
    async with connect(f"unix:{monitored.socket_path}") as channel:
        yield channel


@pytest.mark.parametrize("service", ["", "betcode.v1.VersionService", "grpc.health.v1.Health"])
async def test_both_health_services_report_serving(chan: grpc.aio.Channel, service: str) -> None:
    standard = await std_grpc.HealthStub(chan).Check(std_pb2.HealthCheckRequest(service=service))
    ours = await health_pb2_grpc.HealthStub(chan).Check(
        health_pb2.HealthCheckRequest(service=service)
    )
    assert standard.status == std_pb2.HealthCheckResponse.SERVING
    assert ours.status == SERVING


async def test_unknown_service_is_not_found_on_both(chan: grpc.aio.Channel) -> None:
    for check in (
        std_grpc.HealthStub(chan).Check(std_pb2.HealthCheckRequest(service="no.Such")),
        health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(service="no.Such")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await check
        assert failure.value.code() == grpc.StatusCode.NOT_FOUND


async def test_watchers_see_a_critical_component_go_down_and_recover(
    monitored: DaemonServer, chan: grpc.aio.Channel, storage: Switch
) -> None:
    standard = std_grpc.HealthStub(chan).Watch(std_pb2.HealthCheckRequest(service=""))
    ours = health_pb2_grpc.HealthStub(chan).Watch(health_pb2.HealthCheckRequest(service=""))
    assert (await standard.read()).status == std_pb2.HealthCheckResponse.SERVING
    assert (await ours.read()).status == SERVING

    storage.report = ComponentReport(False, "writes failing")
    await monitored.health.refresh()
    assert (await standard.read()).status == std_pb2.HealthCheckResponse.NOT_SERVING
    assert (await ours.read()).status == NOT_SERVING

    storage.report = ComponentReport(True)
    await monitored.health.refresh()
    assert (await standard.read()).status == std_pb2.HealthCheckResponse.SERVING
    assert (await ours.read()).status == SERVING
    standard.cancel()
    ours.cancel()


async def test_list_names_every_tracked_service_with_its_status_and_logs_no_error(
    monitored: DaemonServer,
    chan: grpc.aio.Channel,
    storage: Switch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    listed = await std_grpc.HealthStub(chan).List(std_pb2.HealthListRequest())
    statuses = {name: answer.status for name, answer in listed.statuses.items()}
    assert {"", "betcode.v1.VersionService", "grpc.health.v1.Health"} <= statuses.keys()
    assert set(statuses.values()) == {std_pb2.HealthCheckResponse.SERVING}

    storage.report = ComponentReport(False, "writes failing")
    await monitored.health.refresh()
    listed = await std_grpc.HealthStub(chan).List(std_pb2.HealthListRequest())
    assert listed.statuses[""].status == std_pb2.HealthCheckResponse.NOT_SERVING
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


async def test_graceful_shutdown_reports_not_serving_and_ends_our_watch(
    monitored: DaemonServer, chan: grpc.aio.Channel
) -> None:
    ours = health_pb2_grpc.HealthStub(chan).Watch(health_pb2.HealthCheckRequest(service=""))
    assert (await ours.read()).status == SERVING

    await monitored.health.enter_graceful_shutdown()
    await monitored.health.refresh()  # a late refresh must not bring SERVING back

    assert (await ours.read()).status == NOT_SERVING
    assert await ours.read() is grpc.aio.EOF
    standard = await std_grpc.HealthStub(chan).Check(std_pb2.HealthCheckRequest(service=""))
    assert standard.status == std_pb2.HealthCheckResponse.NOT_SERVING


async def test_a_shutdown_while_a_status_is_being_sent_is_still_sent_before_the_end() -> None:
    """The Watch generator waits at its yield while gRPC writes SERVING; a shutdown then must
    not end the stream without NOT_SERVING (seen under load over a real socket)."""
    board = StatusBoard()
    request = health_pb2.HealthCheckRequest(service="")
    watch = board.Watch(request, context=None)  # Watch never uses it
    assert (await anext(watch)).status == SERVING
    board.enter_graceful_shutdown()
    assert (await anext(watch)).status == NOT_SERVING
    with pytest.raises(StopAsyncIteration):
        await anext(watch)


async def test_details_name_components_claude_code_and_metadata(
    monitored: DaemonServer, chan: grpc.aio.Channel
) -> None:
    monitored.health.add_component(
        "subprocess_pool",
        lambda: ComponentReport(False, "8 of 8 in use", degraded_reason="subprocess_pool_full"),
        critical=False,
    )
    details = await health_pb2_grpc.BetCodeHealthStub(chan).GetHealthDetails(
        health_pb2.HealthDetailsRequest()
    )

    assert details.overall_status == SERVING
    assert details.degraded
    assert details.degraded_reason == "subprocess_pool_full"
    components = {c.name: (c.status, c.message) for c in details.components}
    assert components["sqlite"] == (SERVING, "last write 1 s ago")
    assert components["subprocess_pool"] == (NOT_SERVING, "8 of 8 in use")
    assert components["local_server"][0] == SERVING
    assert str(monitored.socket_path) in components["local_server"][1]
    assert all(c.last_check.seconds > 0 for c in details.components)
    assert details.claude_code.binary_source == "pinned"
    assert details.claude_code.version == "2.1.330"
    assert details.claude_code.compatibility == version_pb2.FULLY_COMPATIBLE
    assert details.metadata["version"] == "0.1.0"
    assert int(details.metadata["uptime_seconds"]) >= 0


# (components as (critical, report) pairs, overall, degraded, reason)
OVERALL_TABLE = [
    ([], SERVING, False, ""),
    ([(True, ComponentReport(True)), (False, ComponentReport(True))], SERVING, False, ""),
    ([(True, ComponentReport(False, "down"))], NOT_SERVING, False, ""),
    ([(False, ComponentReport(False, "down"))], SERVING, True, "c0_not_serving"),
    (
        [(True, ComponentReport(True, degraded_reason="sqlite_write_failed"))],
        SERVING,
        True,
        "sqlite_write_failed",
    ),
    (
        [
            (False, ComponentReport(False, degraded_reason="tunnel_disconnected")),
            (False, ComponentReport(False, degraded_reason="subprocess_pool_full")),
        ],
        SERVING,
        True,
        "tunnel_disconnected,subprocess_pool_full",
    ),
    (
        [(True, ComponentReport(False)), (False, ComponentReport(False, degraded_reason="x"))],
        NOT_SERVING,
        True,
        "x",
    ),
]


@pytest.mark.parametrize(("components", "overall", "degraded", "reason"), OVERALL_TABLE)
async def test_overall_status_and_degraded_reason(
    components: list[tuple[bool, ComponentReport]], overall: int, degraded: bool, reason: str
) -> None:
    health = HealthMonitor(server_version="0.1.0")
    for index, (critical, report) in enumerate(components):
        health.add_component(f"c{index}", Switch(report), critical=critical)
    details = await health.refresh()
    assert (details.overall_status, details.degraded, details.degraded_reason) == (
        overall,
        degraded,
        reason,
    )
    assert not details.HasField("claude_code")


async def test_a_check_that_raises_counts_as_not_serving() -> None:
    health = HealthMonitor(server_version="0.1.0")
    health.add_component("sqlite", _failing_check, critical=True)
    details = await health.refresh()
    assert details.overall_status == NOT_SERVING
    assert details.components[0].message == "check failed: OSError: database is locked"


def test_a_component_name_is_registered_once() -> None:
    health = HealthMonitor(server_version="0.1.0")
    health.add_component("sqlite", Switch(ComponentReport(True)), critical=True)
    with pytest.raises(ValueError, match="already registered"):
        health.add_component("sqlite", Switch(ComponentReport(True)), critical=True)


async def test_a_components_counters_appear_in_the_metadata_by_name() -> None:
    health = HealthMonitor(server_version="0.1.0")

    async def permissions() -> ComponentReport:
        await asyncio.sleep(0)  # a check may read the store
        return ComponentReport(True, "1 pending", metrics={"pending": 1, "auto_deny": 4})

    health.add_component("permissions", permissions, critical=False)
    details = await health.refresh()
    assert details.metadata["permissions.pending"] == "1"
    assert details.metadata["permissions.auto_deny"] == "4"
    assert details.components[0].message == "1 pending"


async def test_an_async_check_that_hangs_counts_as_not_serving() -> None:
    health = HealthMonitor(server_version="0.1.0", check_timeout_s=0.01)

    async def stuck() -> ComponentReport:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    health.add_component("sqlite", stuck, critical=True)
    details = await health.refresh()
    assert details.overall_status == NOT_SERVING
    assert details.components[0].message == "check timed out after 0.01s"
