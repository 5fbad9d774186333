"""Health: the standard grpc.health.v1.Health, its look-alike betcode.v1.Health, and
betcode.v1.BetCodeHealth.GetHealthDetails, all fed by registered component checks.

Overall status: NOT_SERVING if a critical component is not serving, else
SERVING; a failing non-critical component, or any component reporting a ``degraded_reason``,
sets ``degraded``. The overall status is what both Health services answer for the empty service
name and for every service the server registered.

A component may also report counters (``ComponentReport.metrics``); each appears in the details'
``metadata`` as ``<component>.<counter>`` (e.g. ``permissions.auto_deny``), so the wire shape is
unchanged.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2 as standard_health_pb2
from grpc_health.v1._async import HealthServicer as StandardHealthServicer

from betcode.permissions.bridge import PermissionBridge
from betcode.server.claude_status import ClaudeCodeProvider
from betcode.server.errors import abort
from betcode.v1 import health_pb2

logger = logging.getLogger(__name__)

ServingStatus: TypeAlias = health_pb2.ServingStatus.ValueType
StandardStatus: TypeAlias = standard_health_pb2.HealthCheckResponse.ServingStatus.ValueType


@dataclass(frozen=True, slots=True)
class ComponentReport:
    serving: bool
    message: str = ""
    # Set while serving but impaired, e.g. "sqlite_write_failed"; shown as the degraded reason.
    degraded_reason: str = ""
    metrics: Mapping[str, int] = field(default_factory=dict)


# Called on every refresh on the event loop: a plain check must only read in-memory state; a
# check that needs I/O is a coroutine function, given a few seconds to answer (see HealthMonitor).
ComponentCheck = Callable[[], ComponentReport | Awaitable[ComponentReport]]


@dataclass(frozen=True, slots=True)
class _Component:
    name: str
    check: ComponentCheck
    critical: bool


class StatusBoard:
    """betcode.v1.Health: per-service serving status with Check and Watch."""

    def __init__(self) -> None:
        self._statuses: dict[str, ServingStatus] = {"": health_pb2.SERVING}
        self._changed = asyncio.Event()
        self._shutting_down = False

    def set(self, service: str, status: ServingStatus) -> None:
        if self._shutting_down:
            return
        self._put(service, status)

    def enter_graceful_shutdown(self) -> None:
        for service in self._statuses:
            self._put(service, health_pb2.NOT_SERVING)
        self._shutting_down = True

    def statuses(self) -> dict[str, ServingStatus]:
        return dict(self._statuses)

    def _put(self, service: str, status: ServingStatus) -> None:
        self._statuses[service] = status
        # Wake every watcher, then give later watchers a fresh event to wait on.
        self._changed.set()
        self._changed = asyncio.Event()

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        status = self._statuses.get(request.service)
        if status is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        last: ServingStatus | None = None
        while True:
            # Take the event before reading, so a change while we yield is not missed.
            changed = self._changed
            status = self._statuses.get(request.service, health_pb2.SERVICE_UNKNOWN)
            if status != last:
                yield health_pb2.HealthCheckResponse(status=status)
                last = status
            elif self._shutting_down:
                # Only once the latest status is sent: a shutdown that came while the previous
                # one was being written must still send NOT_SERVING before the stream ends.
                return
            else:
                await changed.wait()


class HealthMonitor:
    """Runs the component checks and publishes the result to all three health services."""

    def __init__(
        self,
        *,
        server_version: str,
        claude_code: ClaudeCodeProvider | None = None,
        facts: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        check_timeout_s: float = 2.0,
    ) -> None:
        self.board = StatusBoard()
        self.standard = StandardHealth(self.board)
        self._server_version = server_version
        # Fixed for the daemon's life (its pid, socket, data dir): `betcode daemon status|stop`
        # learn which process serves a socket by asking over that socket.
        self._facts = dict(facts or {})
        self._claude_code = claude_code
        self._clock = clock
        self._check_timeout_s = check_timeout_s
        self._started_at = clock()
        self._components: dict[str, _Component] = {}
        self._services: list[str] = []

    def add_component(self, name: str, check: ComponentCheck, *, critical: bool) -> None:
        if name in self._components:
            raise ValueError(f"health component {name!r} is already registered")
        self._components[name] = _Component(name, check, critical)

    def track_services(self, service_names: Iterable[str]) -> None:
        """Services whose status follows the overall status (set on the next refresh)."""
        self._services.extend(name for name in service_names if name not in self._services)

    async def refresh(self) -> health_pb2.HealthDetailsResponse:
        checked_at = Timestamp()
        checked_at.GetCurrentTime()
        reports = [
            (component, await _run_check(component, self._check_timeout_s))
            for component in self._components.values()
        ]
        critical_down = any(c.critical and not r.serving for c, r in reports)
        reasons = [
            r.degraded_reason or f"{c.name}_not_serving"
            for c, r in reports
            if r.degraded_reason or (not r.serving and not c.critical)
        ]
        overall = health_pb2.NOT_SERVING if critical_down else health_pb2.SERVING
        details = health_pb2.HealthDetailsResponse(
            overall_status=overall,
            components=[
                health_pb2.ComponentHealth(
                    name=c.name,
                    status=health_pb2.SERVING if r.serving else health_pb2.NOT_SERVING,
                    message=r.message,
                    last_check=checked_at,
                )
                for c, r in reports
            ],
            metadata={
                **self._facts,
                "version": self._server_version,
                "uptime_seconds": str(int(self._clock() - self._started_at)),
                **{
                    f"{c.name}.{key}": str(value)
                    for c, r in reports
                    for key, value in r.metrics.items()
                },
            },
            degraded=bool(reasons),
            degraded_reason=",".join(reasons),
        )
        claude = self._claude_code() if self._claude_code else None
        if claude is not None:
            details.claude_code.CopyFrom(claude.to_health_status())
        await self._publish(overall)
        return details

    async def run(self, interval_s: float) -> None:
        """Refreshes forever (cancel the task to stop), so Watch clients see changes."""
        while True:
            await self.refresh()
            await asyncio.sleep(interval_s)

    async def enter_graceful_shutdown(self) -> None:
        """Every service reports NOT_SERVING from now on."""
        self.board.enter_graceful_shutdown()
        await self.standard.enter_graceful_shutdown()

    async def _publish(self, overall: ServingStatus) -> None:
        for service in ("", *self._services):
            self.board.set(service, overall)
            await self.standard.set(service, _standard(overall))


def _standard(status: ServingStatus) -> StandardStatus:
    return standard_health_pb2.HealthCheckResponse.ServingStatus.Value(
        health_pb2.ServingStatus.Name(status)
    )


class StandardHealth(StandardHealthServicer):  # type: ignore[misc]  # untyped library
    """grpc.health.v1.Health as grpcio-health-checking serves it, plus List: the library
    leaves List to the generated base class, which raises (an ERROR traceback per call)."""

    def __init__(self, board: StatusBoard) -> None:
        super().__init__()
        self._board = board  # the same statuses, set together by HealthMonitor

    async def List(
        self,
        request: standard_health_pb2.HealthListRequest,
        context: grpc.aio.ServicerContext,
    ) -> standard_health_pb2.HealthListResponse:
        statuses = {
            service: standard_health_pb2.HealthCheckResponse(status=_standard(status))
            for service, status in self._board.statuses().items()
        }
        return standard_health_pb2.HealthListResponse(statuses=statuses)


async def _run_check(component: _Component, timeout_s: float) -> ComponentReport:
    try:
        report = component.check()
        if inspect.isawaitable(report):
            return await asyncio.wait_for(report, timeout_s)
        return report
    except TimeoutError:
        logger.warning("health check %r timed out", component.name)
        return ComponentReport(False, f"check timed out after {timeout_s:g}s")
    except Exception as error:
        logger.warning("health check %r failed", component.name, exc_info=True)
        return ComponentReport(False, f"check failed: {type(error).__name__}: {error}")


def permission_check(bridge: PermissionBridge) -> ComponentCheck:
    """The permission bridge's report: decisions by kind since startup (``bridge.metrics``)
    and the requests still waiting for an answer (read from the store: they outlive claude
    processes and daemon restarts, so the in-memory view alone would undercount them)."""

    async def check() -> ComponentReport:
        pending = len(await bridge.list_pending(None))
        decisions = bridge.metrics.snapshot()
        summary = ", ".join(f"{kind} {count}" for kind, count in decisions.items())
        return ComponentReport(
            True,
            f"{pending} pending; decisions: {summary}",
            metrics={"pending": pending, **decisions},
        )

    return check


class HealthDetailsService:
    """betcode.v1.BetCodeHealth."""

    def __init__(self, monitor: HealthMonitor) -> None:
        self._monitor = monitor

    async def GetHealthDetails(
        self, request: health_pb2.HealthDetailsRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthDetailsResponse:
        return await self._monitor.refresh()
