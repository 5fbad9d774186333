"""Storage figures: StoreWriter throughput, commit latency at a steady rate, replay speed.

    .venv/bin/python benchmarks/bench_storage.py [--quick] [--json]

* writer rows/s: single-row appends of ~700 B payloads, as fast as the writer commits them
  (a bounded backlog, like a busy session);
* writer lines/s: appends of one line + two events (what ingest does per stdout line);
* commit latency: one row per millisecond (1k rows/s); time from `append` on the loop until
  its commit callback runs on the loop; p50 / p99;
* replay: read a 100k-event session through StoreReader in keyset pages of 1000.

Figures are printed, never asserted; `--json` ends the output with one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from betcode.storage import (
    Database,
    EventRow,
    LogRow,
    MessageRow,
    StoreReader,
    StoreWriter,
    open_database,
    transaction,
)
from betcode.storage.rows import INSERT_EVENT
from betcode.storage.sessions import create_session

PAYLOAD = (
    b'{"type":"stream_event","event":{"type":"content_block_delta","delta":{"text":"'
    + (b"lorem ipsum " * 52)
    + b'"}}}'
)  # ~700 bytes
MAX_BACKLOG_ROWS = 10_000


def new_database(directory: Path, name: str) -> Database:
    database = open_database(directory / f"{name}.db")
    conn = database.connect()
    create_session(conn, session_id="s", model="m", working_directory="/", now=time.time())
    conn.close()
    return database


def event(seq: int) -> EventRow:
    return EventRow("s", seq, None, "text_delta", PAYLOAD, time.time())


def line_with_events(line: int) -> list[LogRow]:
    now = time.time()
    return [
        MessageRow("s", line, "out", "stream_event", PAYLOAD, now),
        EventRow("s", 2 * line - 1, line, "text_delta", PAYLOAD, now),
        EventRow("s", 2 * line, line, "text_delta", PAYLOAD, now),
    ]


async def flood(database: Database, groups: Sequence[Sequence[LogRow]]) -> float:
    """Append every group as fast as the writer takes them; return elapsed seconds."""
    writer = StoreWriter(database)
    max_backlog = MAX_BACKLOG_ROWS // len(groups[0])
    appended = committed = 0
    room, done = asyncio.Event(), asyncio.Event()

    def on_committed(ok: bool) -> None:
        nonlocal committed
        committed += 1
        if appended - committed <= max_backlog // 2:
            room.set()
        if committed == len(groups):
            done.set()

    started = time.perf_counter()
    for group in groups:
        if appended - committed >= max_backlog:
            room.clear()
            await room.wait()
        writer.append(group, on_committed)
        appended += 1
    await done.wait()
    elapsed = time.perf_counter() - started
    await writer.close()
    return elapsed


async def commit_latency(database: Database, rate: int, seconds: float) -> list[float]:
    """Append one row every 1/rate s; return each append→callback latency in ms."""
    writer = StoreWriter(database)
    latencies: list[float] = []
    count = int(rate * seconds)
    start = time.perf_counter()
    for seq in range(1, count + 1):
        delay = start + seq / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        appended = time.perf_counter()

        def committed(ok: bool, at: float = appended) -> None:
            latencies.append((time.perf_counter() - at) * 1000)

        writer.append([event(seq)], committed)
    await writer.call(lambda _conn: None)
    await writer.close()
    return latencies


async def replay_seconds(database: Database, events: int) -> float:
    conn = database.connect()
    with transaction(conn):
        conn.executemany(INSERT_EVENT, (event(seq) for seq in range(1, events + 1)))
    conn.close()
    reader = StoreReader(database)
    await reader.read_events("s", 0, limit=1)  # open the pooled connection outside the timing
    started = time.perf_counter()
    after, seen = 0, 0
    while page := await reader.read_events("s", after):
        after = page[-1][0]
        seen += len(page)
    elapsed = time.perf_counter() - started
    reader.close()
    assert seen == events, f"replayed {seen} of {events} events"
    return elapsed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(quick: bool) -> dict[str, float | int | str]:
    rows = 50_000 if quick else 200_000
    lines = 20_000 if quick else 100_000
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        directory = Path(tmp)
        single = await flood(
            new_database(directory, "rows"), [[event(n)] for n in range(1, rows + 1)]
        )
        grouped = await flood(
            new_database(directory, "lines"), [line_with_events(n) for n in range(1, lines + 1)]
        )
        latencies = await commit_latency(
            new_database(directory, "latency"), 1000, 2 if quick else 5
        )
        replay = await replay_seconds(new_database(directory, "replay"), 100_000)
    return {
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "payload_bytes": len(PAYLOAD),
        "writer_rows_per_s": round(rows / single),
        "writer_lines_per_s": round(lines / grouped),
        "writer_lines_rows_per_s": round(3 * lines / grouped),
        "commit_latency_p50_ms": round(statistics.median(latencies), 3),
        "commit_latency_p99_ms": round(percentile(latencies, 0.99), 3),
        "commit_latency_max_ms": round(max(latencies), 3),
        "replay_100k_s": round(replay, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (a few seconds)")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    args = parser.parse_args()
    figures = asyncio.run(run(args.quick))
    width = max(len(name) for name in figures)
    for name, value in figures.items():
        print(f"{name:<{width}}  {value}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
