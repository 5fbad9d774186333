"""The health components that read the daemon's own state: `sqlite` (a write
succeeded recently when writes wait), `subprocess_pool` (a session can still be started),
`memory` and `buffers`. Each is a plain check on in-memory readings (server/health.py runs them
every refresh); each names its degraded reason.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from betcode.server.health import ComponentReport, HealthMonitor
from betcode.sessions.manager import SessionManager
from betcode.storage.writer import StoreWriter

# Each check here answers at once (a ComponentCheck that is never awaitable).
SyncCheck = Callable[[], ComponentReport]

STALE_WRITE_SECONDS = 30.0  # writes waiting and none committed for this long: sqlite is stuck
HIGH_MEMORY_PERCENT = 80.0
BUFFER_HIGH_FRACTION = 0.8  # a client queue this full
WRITER_QUEUE_HIGH = 10_000  # items waiting for the writer thread
_MEMINFO = Path("/proc/meminfo")


def add_resource_components(
    health: HealthMonitor, writer: StoreWriter, sessions: SessionManager
) -> None:
    """sqlite (critical), subprocess_pool, memory and buffers."""
    health.add_component("sqlite", sqlite_check(writer), critical=True)
    health.add_component("subprocess_pool", subprocess_pool_check(sessions), critical=False)
    health.add_component("memory", memory_check(), critical=False)
    health.add_component("buffers", buffers_check(sessions, writer), critical=False)


def sqlite_check(writer: StoreWriter, clock: Callable[[], float] = time.monotonic) -> SyncCheck:
    """Not serving when writes wait and none has committed for STALE_WRITE_SECONDS (an idle
    store that has nothing to write is fine); degraded after a failed write (sticky)."""
    started = clock()

    def check() -> ComponentReport:
        health = writer.health()
        last = started if health.last_commit_at is None else health.last_commit_at
        since = clock() - last
        if health.queue_depth and since >= STALE_WRITE_SECONDS:
            return ComponentReport(
                False,
                f"{health.queue_depth} writes waiting, none committed for {since:.0f} s",
                degraded_reason="sqlite_write_stale",
            )
        if health.degraded:
            return ComponentReport(
                True, f"writes failed: {health.last_error}", degraded_reason="sqlite_write_failed"
            )
        return ComponentReport(
            True,
            f"{health.rows_committed} rows committed, {health.queue_depth} writes waiting",
            metrics={"queue_depth": health.queue_depth, "failed_writes": health.failed_writes},
        )

    return check


def subprocess_pool_check(sessions: SessionManager) -> SyncCheck:
    """Full when `daemon.max_sessions` sessions are in use: a new session would be refused."""

    def check() -> ComponentReport:
        in_use, limit = sessions.in_use(), sessions.max_sessions
        message = f"{in_use} of {limit} sessions in use" if limit else f"{in_use} sessions in use"
        if limit is not None and in_use >= limit:
            return ComponentReport(False, message + "; new sessions are refused",
                                   degraded_reason="subprocess_pool_full")  # fmt: skip
        return ComponentReport(True, message, metrics={"in_use": in_use})

    return check


def memory_check(read_meminfo: Callable[[], str | None] | None = None) -> SyncCheck:
    """The machine's memory in use (MemTotal - MemAvailable); degraded above 80 %. Where
    /proc/meminfo does not exist the component says it cannot tell, and serves."""
    read = read_meminfo if read_meminfo is not None else _read_meminfo

    def check() -> ComponentReport:
        percent = used_memory_percent(read())
        if percent is None:
            return ComponentReport(True, "memory use unknown on this platform")
        message = f"{percent:.0f} % of the machine's memory in use"
        if percent > HIGH_MEMORY_PERCENT:
            return ComponentReport(True, message, degraded_reason="high_memory")
        return ComponentReport(True, message)

    return check


def buffers_check(sessions: SessionManager, writer: StoreWriter) -> SyncCheck:
    """Degraded when a client's queue is over 80 % full or the writer's queue is long."""

    def check() -> ComponentReport:
        fullest = max((session.hub.fullest() for session in sessions.live), default=0.0)
        depth = writer.queue_depth()
        message = f"fullest client queue {fullest:.0%}, writer queue {depth}"
        if fullest > BUFFER_HIGH_FRACTION or depth > WRITER_QUEUE_HIGH:
            return ComponentReport(True, message, degraded_reason="buffer_high")
        return ComponentReport(True, message)

    return check


def used_memory_percent(meminfo: str | None) -> float | None:
    if not meminfo:
        return None
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        number = rest.split()[0] if rest.split() else ""
        if number.isdigit():
            values[name] = int(number)
    total, available = values.get("MemTotal"), values.get("MemAvailable")
    if not total or available is None:
        return None
    return 100.0 * (total - available) / total


def _read_meminfo() -> str | None:
    if os.name != "posix" or not _MEMINFO.exists():
        return None
    try:
        return _MEMINFO.read_text()
    except OSError:
        return None
