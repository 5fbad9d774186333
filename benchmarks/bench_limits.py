"""What the limits (docs/LIMITS.md) cost per turn: expected negligible next to a turn's seconds.

    .venv/bin/python benchmarks/bench_limits.py [--quick] [--json]

* cost check: `TurnAdmission.cap_reached`, what every message pays before its turn starts (one
  store-writer round trip reading the session's spend, its own cap and the day's spend), on a
  database of 500 sessions with 30 days of spend rows each;
* spend write: `spend.add_turn_cost`, what every turn's end adds to the usage write;
* queue: `TurnQueue.submit` + the turn-end release, with no cap (the direct path) and with a
  cap not reached, around a turn start that does nothing;
* memory check: `process_trees_rss` of 1 and of 50 trees (this process's), one pass over
  /proc (every 10 s for all live sessions, not per turn; the machine's process count is
  printed with it).

Each operation is timed on its own (perf_counter_ns); p50 / p99 are printed, never asserted;
`--json` ends the output with one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import cast

from betcode.config.layers import PermissionLists
from betcode.config.settings import LimitSettings
from betcode.limits.admission import TurnAdmission
from betcode.limits.memory import MemoryWatch, process_trees_rss
from betcode.limits.turn_queue import TurnQueue
from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.rulebook import RuleBook
from betcode.sessions.session import Session
from betcode.sessions.turns import TurnEnd
from betcode.storage import StoreReader, StoreWriter, open_database
from betcode.storage import spend as spend_rows
from betcode.storage.sessions import add_usage, create_session

SESSIONS = 500
DAYS = 30
DAY_SECONDS = 86_400.0


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {
        "p50_us": statistics.median(ordered) / 1000,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1000,
    }


def fill(path: Path) -> None:
    database = open_database(path)
    conn = database.connect()
    now = time.time()
    with conn:
        for n in range(SESSIONS):
            session_id = f"session-{n}"
            create_session(conn, session_id=session_id, model="m", working_directory="/", now=now)
            add_usage(conn, session_id, input_tokens=1, output_tokens=1, cost_usd=0.5, now=now)
            for day in range(DAYS):
                spend_rows.add_turn_cost(conn, session_id, 0.01, now - day * DAY_SECONDS)
    conn.close()


class StandIn:
    """What the queue touches of a session: its id, turn listeners, and events shown."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.turn_listeners: list[Callable[[TurnEnd], None]] = []
        self.closed = False

    def emit(self, events: object) -> list[object]:
        return []

    def end_turn(self) -> None:
        for listener in self.turn_listeners:
            listener(TurnEnd(True, "", 0))


async def measure_checks(directory: Path, rounds: int) -> dict[str, dict[str, float]]:
    fill(directory / "limits.db")
    database = open_database(directory / "limits.db")
    writer, reader = StoreWriter(database), StoreReader(database)
    settings = LimitSettings(session_cost_usd=100.0, daily_cost_usd=1000.0)
    bridge = PermissionBridge(writer, reader, rules=RuleBook(directory, PermissionLists()))
    memory = MemoryWatch(list, lambda _: False, settings)
    admission = TurnAdmission(writer, bridge, settings, memory)
    checks, writes = [], []
    try:
        for n in range(rounds):
            session_id = f"session-{n % SESSIONS}"
            started = time.perf_counter_ns()
            reached = await admission.cap_reached(session_id)
            checks.append(time.perf_counter_ns() - started)
            assert reached is None
            started = time.perf_counter_ns()
            await writer.call(
                partial(
                    spend_rows.add_turn_cost, session_id=session_id, cost_usd=0.0, now=time.time()
                )
            )
            writes.append(time.perf_counter_ns() - started)
    finally:
        await bridge.close()
        await writer.close()
        reader.close()
    return {"cost_check": percentiles(checks), "spend_write": percentiles(writes)}


class NoStore:
    """The queue's store: never used while a place is free, as here."""

    async def add(self, session_id: str, text: str, idempotency_key: str) -> int:
        raise AssertionError("nothing waits in this benchmark")

    def remove(self, row_ids: list[int]) -> None:
        raise AssertionError("nothing waits in this benchmark")


async def measure_queue(rounds: int, max_running: int) -> dict[str, float]:
    async def start(
        session: Session, client_id: str | None, text: str, queued_id: int | None, key: str
    ) -> bool:
        return True

    queue = TurnQueue(max_running, start, NoStore())
    sessions = [StandIn(f"s{n}") for n in range(16)]
    samples = []
    for n in range(rounds):
        stand_in = sessions[n % len(sessions)]
        started = time.perf_counter_ns()
        await queue.submit(cast("Session", stand_in), None, "hello")
        stand_in.end_turn()
        samples.append(time.perf_counter_ns() - started)
    return percentiles(samples)


def measure_memory(rounds: int, sessions: int) -> dict[str, float]:
    """One check of `sessions` claude trees (one /proc pass for all of them)."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        process_trees_rss([os.getpid()] * sessions)
        samples.append(time.perf_counter_ns() - started)
    return percentiles(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    options = parser.parse_args()
    rounds = 300 if options.quick else 3000
    with tempfile.TemporaryDirectory() as directory:
        results = asyncio.run(measure_checks(Path(directory), rounds))
    results["queue_no_cap"] = asyncio.run(measure_queue(rounds * 10, 0))
    results["queue_with_cap"] = asyncio.run(measure_queue(rounds * 10, 1000))
    results["memory_check"] = measure_memory(max(rounds // 30, 20), 1)
    results["memory_check_50"] = measure_memory(max(rounds // 30, 20), 50)
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    machine = f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    print(f"limits, per turn ({machine}; {SESSIONS} sessions x {DAYS} days of spend rows)")
    labels = {
        "cost_check": "cost check before a turn (store writer round trip)",
        "spend_write": "spend-by-day write at a turn's end (one writer call)",
        "queue_no_cap": "turn queue, no cap (submit + release)",
        "queue_with_cap": "turn queue, cap not reached (submit + release)",
        "memory_check": f"memory check, 1 session, /proc of {processes} processes (every 10 s)",
        "memory_check_50": "memory check, 50 sessions, one /proc pass (every 10 s)",
    }
    for key, label in labels.items():
        figures = results[key]
        print(f"  {label:<72} p50 {figures['p50_us']:8.1f} µs   p99 {figures['p99_us']:8.1f} µs")
    if options.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
