"""Daemon figures with a fake-claude flood, through real gRPC on a Unix socket.

    .venv/bin/python benchmarks/run.py [--quick] [--json]

The daemon runs in this process and event loop (as `tests/` do), so its clients share the
CPU with it: every figure is a lower bound for the daemon alone, and rss_mb includes the
clients' memory too.

* ingest_lines_per_s: one session, a full-speed flood of text_delta lines; lines / time from
  sending the message to its TurnComplete reaching the Converse client (all persisted);
* broadcast_events_per_s: the same flood watched by 1/10/100 per-event ResumeSession streams;
  events delivered to all clients / time (the best of the three client counts is the headline);
* batched_events_per_s: the same on ResumeSessionBatched;
* latency_p50_ms / p99_ms: 1,000 lines/s with 10 clients; each line carries the fake's
  CLOCK_MONOTONIC write time, matched to the event via events.message_sequence;
* replay_100k_s: a 100,000-event session replayed from 0 on the batched stream;
* rss_mb: process RSS with 20 sessions (one claude each) and 100 attached clients.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import psutil

from betcode.claude.backoff import SupervisorPolicy
from betcode.daemon import Daemon, DaemonConfig
from betcode.devtools.fake_claude import make_fake_claude
from betcode.v1 import agent_pb2, agent_pb2_grpc

POLICY = SupervisorPolicy(idle_reap_seconds=None, watchdog_seconds=600.0)


class Bench:
    """One daemon whose fake claude answers every message with `turn`."""

    def __init__(self, root: Path, daemon: Daemon) -> None:
        self.root = root
        self.daemon = daemon
        self.channel = grpc.aio.insecure_channel(f"unix:{daemon.config.socket_path}")
        self.stub = agent_pb2_grpc.AgentServiceStub(self.channel)
        self.last_seq = 0  # the last event seq the driver saw

    async def open_session(self) -> tuple[asyncio.Queue[agent_pb2.AgentRequest], Any, str]:
        self.last_seq = 0
        outbox: asyncio.Queue[agent_pb2.AgentRequest] = asyncio.Queue()
        start = agent_pb2.StartConversation(working_directory=str(self.root / "repo"))
        outbox.put_nowait(agent_pb2.AgentRequest(start=start))

        async def requests() -> AsyncIterator[agent_pb2.AgentRequest]:
            while True:
                yield await outbox.get()

        call = self.stub.Converse(requests(), metadata=(("x-client-id", "driver"),))
        async for event in call:
            if event.WhichOneof("event") == "session_info":
                return outbox, call, event.session_info.session_id
        raise RuntimeError("Converse ended before session_info")

    async def turn(self, outbox: Any, call: Any) -> float:
        """Send one message; seconds until its TurnComplete reaches the driver."""
        started = time.perf_counter()
        outbox.put_nowait(agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content="go")))
        async for event in call:
            self.last_seq = max(self.last_seq, event.sequence)
            if event.WhichOneof("event") == "turn_complete":
                return time.perf_counter() - started
        raise RuntimeError("Converse ended before turn_complete")


@asynccontextmanager
async def bench_daemon(root: Path, turn: list[dict[str, Any]]) -> AsyncIterator[Bench]:
    (root / "repo").mkdir(parents=True)
    fake = make_fake_claude(root / "fake", {"turns": [turn]})
    config = DaemonConfig(
        data_dir=root / "data",
        socket_path=root / "sock" / "daemon.sock",
        claude_bin=str(fake),
        environ={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root)},
        policy=POLICY,
    )
    daemon = Daemon(config)
    await daemon.start()
    bench = Bench(root, daemon)
    try:
        yield bench
    finally:
        await bench.channel.close()
        await daemon.stop()


async def watch(stub: Any, session_id: str, after: int, batched: bool, ready: Any) -> int:
    """Count events after `after` until a TurnComplete; `ready` is set once attached."""
    request = agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=after)
    method = stub.ResumeSessionBatched if batched else stub.ResumeSession
    call = method(request)
    await call.wait_for_connection()
    ready()
    count = 0
    async for message in call:
        events = message.events if batched else [message]
        count += len(events)
        if any(e.WhichOneof("event") == "turn_complete" for e in events):
            call.cancel()
            return count
    return count


async def fan_out(bench: Bench, lines: int, clients: int, batched: bool) -> float:
    outbox, call, session_id = await bench.open_session()
    await bench.turn(outbox, call)  # claude started: the timed turn measures streaming only
    after = bench.last_seq
    attached = asyncio.Semaphore(0)
    watchers = [
        asyncio.create_task(watch(bench.stub, session_id, after, batched, attached.release))
        for _ in range(clients)
    ]
    for _ in range(clients):
        await attached.acquire()
    started = time.perf_counter()
    await bench.turn(outbox, call)
    counts = await asyncio.gather(*watchers)
    elapsed = time.perf_counter() - started
    call.cancel()
    return sum(counts) / elapsed


async def ingest_and_replay(root: Path, lines: int) -> tuple[float, float, int]:
    async with bench_daemon(root, [{"do": "flood", "lines": lines, "text": "x"}]) as bench:
        outbox, call, session_id = await bench.open_session()
        ingest = lines / await bench.turn(outbox, call)
        call.cancel()
        started = time.perf_counter()
        replayed = 0
        request = agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=0)
        replay = bench.stub.ResumeSessionBatched(request)
        async for batch in replay:
            if not batch.events:  # the live edge
                break
            replayed += len(batch.events)
        replay.cancel()
        return ingest, time.perf_counter() - started, replayed


async def broadcast(root: Path, lines: int, counts: list[int]) -> dict[str, float]:
    figures: dict[str, float] = {}
    async with bench_daemon(root, [{"do": "flood", "lines": lines, "text": "x"}]) as bench:
        for batched in (False, True):
            for clients in counts:
                name = f"{'batched' if batched else 'broadcast'}_{clients}_clients_events_per_s"
                figures[name] = await fan_out(bench, lines, clients, batched)
    return figures


async def latency(root: Path, lines: int) -> tuple[float, float]:
    turn = [{"do": "flood", "lines": lines, "text": "x", "rate": 1000, "stamp": True}]
    async with bench_daemon(root, turn) as bench:
        outbox, call, session_id = await bench.open_session()
        await bench.turn(outbox, call)
        after = bench.last_seq
        received: dict[int, int] = {}
        attached = asyncio.Semaphore(0)

        async def timed_watch() -> None:
            request = agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=after)
            stream = bench.stub.ResumeSession(request)
            await stream.wait_for_connection()
            attached.release()
            async for event in stream:
                received.setdefault(event.sequence, time.monotonic_ns())
                if event.WhichOneof("event") == "turn_complete":
                    stream.cancel()
                    return

        watchers = [asyncio.create_task(timed_watch()) for _ in range(10)]
        for _ in range(10):
            await attached.acquire()
        await bench.turn(outbox, call)
        await asyncio.gather(*watchers)
        call.cancel()
        written = line_write_times(bench.root / "data" / "daemon.db", session_id)
    delays = sorted(
        (received[seq] - written[line]) / 1e6
        for seq, line in written_events(bench, session_id)
        if seq in received and line in written
    )
    return statistics.median(delays), delays[int(len(delays) * 0.99)]


def line_write_times(db_path: Path, session_id: str) -> dict[int, int]:
    with sqlite3.connect(db_path) as db:
        rows = db.execute(
            "SELECT sequence, payload FROM messages WHERE session_id = ? AND payload LIKE ?",
            (session_id, '%"fake_ts_ns"%'),
        ).fetchall()
    return {seq: json.loads(payload)["fake_ts_ns"] for seq, payload in rows}


def written_events(bench: Bench, session_id: str) -> list[tuple[int, int]]:
    with sqlite3.connect(bench.root / "data" / "daemon.db") as db:
        return db.execute(
            "SELECT sequence, message_sequence FROM events"
            " WHERE session_id = ? AND message_sequence IS NOT NULL",
            (session_id,),
        ).fetchall()


async def resident_memory(root: Path, sessions: int, clients: int) -> float:
    async with bench_daemon(root, [{"do": "text", "text": "hi"}]) as bench:
        calls = []
        ids = []
        for _ in range(sessions):
            outbox, call, session_id = await bench.open_session()
            await bench.turn(outbox, call)
            calls.append(call)
            ids.append(session_id)
        attached = asyncio.Semaphore(0)
        watchers = [
            asyncio.create_task(watch(bench.stub, ids[i % sessions], 0, False, attached.release))
            for i in range(clients)
        ]
        for _ in range(clients):
            await attached.acquire()
        rss = psutil.Process().memory_info().rss / 2**20
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        for call in calls:
            call.cancel()
        return rss


def machine() -> dict[str, Any]:
    return {
        "uname": " ".join(platform.uname()),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }


async def run(quick: bool) -> dict[str, Any]:
    lines = 20_000 if quick else 100_000
    fan_lines = 2_000 if quick else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ingest, replay_s, replayed = await ingest_and_replay(root / "ingest", lines)
        fan = await broadcast(root / "fan", fan_lines, [1, 10, 100])
        p50, p99 = await latency(root / "latency", 1_000 if quick else 5_000)
        rss = await resident_memory(root / "rss", 20, 100)
    per_event = [v for k, v in fan.items() if k.startswith("broadcast_")]
    batched = [v for k, v in fan.items() if k.startswith("batched_")]
    return {
        "ingest_lines_per_s": round(ingest),
        "broadcast_events_per_s": round(max(per_event)),
        "batched_events_per_s": round(max(batched)),
        "latency_p50_ms": round(p50, 3),
        "latency_p99_ms": round(p99, 3),
        "replay_100k_s": round(replay_s * 100_000 / replayed, 3),
        "rss_mb": round(rss, 1),
        "replayed_events": replayed,
        "quick": quick,
        **{k: round(v) for k, v in fan.items()},
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs, under a minute")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    args = parser.parse_args()
    figures = asyncio.run(run(args.quick))
    for key, value in figures.items():
        if key != "machine":
            print(f"{key:45} {value}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
