"""The OBS-07 components: each one's serving state and degraded reason, and the overall answer
they make together."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from betcode.composition.health_checks import (
    buffers_check,
    memory_check,
    sqlite_check,
    subprocess_pool_check,
    used_memory_percent,
)
from betcode.server.health import HealthMonitor
from betcode.storage.writer import WriterHealth
from betcode.v1 import health_pb2


@dataclass
class Writer:
    queue: int = 0
    last_commit_at: float | None = None
    degraded: bool = False

    def health(self) -> WriterHealth:
        return WriterHealth(
            self.degraded, "OperationalError: disk I/O error" if self.degraded else None,
            int(self.degraded), 0, 1, 10, 0, self.last_commit_at, self.queue,
        )  # fmt: skip

    def queue_depth(self) -> int:
        return self.queue


@dataclass
class Hub:
    fill: float

    def fullest(self) -> float:
        return self.fill


@dataclass
class Sessions:
    used: int = 0
    max_sessions: int | None = 3
    fills: list[float] = field(default_factory=list)

    def in_use(self) -> int:
        return self.used

    @property
    def live(self) -> list[Any]:
        return [type("S", (), {"hub": Hub(fill)})() for fill in self.fills]


def meminfo(total_kb: int, available_kb: int) -> str:
    return f"MemTotal: {total_kb} kB\nMemFree: 1 kB\nMemAvailable: {available_kb} kB\n"


def test_sqlite_is_stuck_only_when_writes_wait_without_a_commit_for_30_s() -> None:
    now = [100.0]
    writer = Writer(queue=4, last_commit_at=80.0)
    check = sqlite_check(writer, clock=lambda: now[0])  # type: ignore[arg-type]
    assert check().serving  # 20 s: still fine
    now[0] = 111.0
    stuck = check()
    assert not stuck.serving
    assert stuck.degraded_reason == "sqlite_write_stale"
    writer.queue = 0  # nothing to write: an idle store is not stuck
    assert check().serving
    writer.degraded = True
    failed = check()
    assert (failed.serving, failed.degraded_reason) == (True, "sqlite_write_failed")


def test_pool_full_memory_and_buffers_name_their_reasons() -> None:
    assert subprocess_pool_check(Sessions(used=2))().degraded_reason == ""  # type: ignore[arg-type]
    full = subprocess_pool_check(Sessions(used=3))()  # type: ignore[arg-type]
    assert (full.serving, full.degraded_reason) == (False, "subprocess_pool_full")
    assert memory_check(lambda: meminfo(1000, 500))().degraded_reason == ""
    assert memory_check(lambda: meminfo(1000, 150))().degraded_reason == "high_memory"
    assert memory_check(lambda: None)().serving  # unknown platform: cannot tell, serves
    calm = buffers_check(Sessions(fills=[0.1, 0.5]), Writer())()  # type: ignore[arg-type]
    assert calm.degraded_reason == ""
    high = buffers_check(Sessions(fills=[0.1, 0.9]), Writer())()  # type: ignore[arg-type]
    assert high.degraded_reason == "buffer_high"
    assert used_memory_percent(meminfo(1000, 250)) == 75.0
    assert used_memory_percent("garbage") is None


async def test_overall_serving_but_degraded_with_every_reason() -> None:
    health = HealthMonitor(server_version="test")
    sessions = Sessions(used=3, fills=[0.95])
    health.add_component("sqlite", sqlite_check(Writer()), critical=True)  # type: ignore[arg-type]
    health.add_component("subprocess_pool", subprocess_pool_check(sessions), critical=False)  # type: ignore[arg-type]
    health.add_component("memory", memory_check(lambda: meminfo(100, 10)), critical=False)
    health.add_component("buffers", buffers_check(sessions, Writer()), critical=False)  # type: ignore[arg-type]
    details = await health.refresh()
    assert details.overall_status == health_pb2.SERVING
    assert details.degraded
    assert details.degraded_reason.split(",") == [
        "subprocess_pool_full",
        "high_memory",
        "buffer_high",
    ]
    stuck = HealthMonitor(server_version="test")
    stuck.add_component(
        "sqlite",
        sqlite_check(Writer(queue=1, last_commit_at=0.0), clock=lambda: 60.0),  # type: ignore[arg-type]
        critical=True,
    )
    assert (await stuck.refresh()).overall_status == health_pb2.NOT_SERVING
