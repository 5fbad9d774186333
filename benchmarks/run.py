"""Daemon figures with a fake-claude flood, through real gRPC on a Unix socket.

    .venv/bin/python benchmarks/run.py [--quick] [--json] [--profile DIR]
    .venv/bin/python benchmarks/run.py --latency-only [--repeat N] [--quick]
    .venv/bin/python benchmarks/run.py --observability [--repeat N] [--quick]
    .venv/bin/python benchmarks/run.py --transport-before REV [--with-grpcio] [--repeat N] [--quick]

The daemon runs as its own process (bench_daemon.py: what `betcode daemon start --foreground`
runs, with fake claude children);
the watching clients run in separate processes (benchmarks/bench_clients.py), this driver in
another. So the figures are the daemon's, on a machine whose cores it shares with its clients.
A turn is sent over Converse, which is closed as soon as the daemon has recorded the message.

* ingest_lines_per_s: one session, a full-speed flood of text_delta lines; lines / time from
  sending the message until its TurnComplete (published only after commit, so every line is
  persisted) reaches one batched client;
* broadcast_events_per_s: the same flood watched by 1/10/100 per-event ResumeSession streams;
  events delivered to all clients / time (the best of the three client counts is the headline);
* batched_events_per_s: the same on ResumeSessionBatched;
* latency_p50_ms / p99_ms: 1,000 lines/s with 10 per-event clients; each line carries the fake's
  CLOCK_MONOTONIC write time, matched to the event via events.message_sequence
  (latency_line_read_*: from that write until the daemon read the line);
  latency_holder_cpu_us_per_line: the CPU of claude's holder process per line (a process of its
  own, outside the daemon's figures, on the same cores);
* replay_100k_s: a 100,000-event session replayed from 0 on the batched stream (scaled from the
  20,000 events of --quick);
* rss_mb: the daemon's RSS with 20 sessions (one claude each) and 100 attached clients;
* latency_*_asyncio_loop: the latency phase again with the daemon on asyncio's own event loop
  (BETCODE_EVENT_LOOP=asyncio) instead of uvloop.

`--observability` runs ingest and latency with observability off and on (metrics endpoint and
OTLP traces to a sink in this process), alternating, `--repeat` rounds (default 3), and prints
each figure's median off and on and their ratio.

`--transport-before REV` measures the streaming figures (daemon CPU per delivered event, the
line→client p50/p99 of the latency phase, the per-event and batched fan-out to 10 clients) with
the daemon's HTTP/2 transport as it was at git revision REV (`src/betcode/server/http2/` of REV
in a copy of today's package, put first on the daemon's PYTHONPATH) and as it is, alternating,
`--repeat` rounds (default 3), and prints each figure's median before and after and their
ratio; `--with-grpcio` adds the daemon on grpc.aio's server (`daemon.grpc.server = "grpcio"`).

`--profile DIR` runs each daemon under cProfile and leaves DIR/<phase>.prof. `--latency-only`
runs just the latency phase, `--repeat N` times, one line per run (with `--json`, then one
JSON object with every run; `--event-loop asyncio` for the daemon on asyncio's own loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import psutil

from betcode.claude.holder import holder as holder_script
from betcode.devtools.fake_claude import make_fake_claude
from betcode.v1 import agent_pb2, agent_pb2_grpc

CLIENTS_SCRIPT = Path(__file__).with_name("bench_clients.py")
DAEMON_SCRIPT = Path(__file__).with_name("bench_daemon.py")
CLIENT_PROCESSES = 2
HOLDER_SCRIPT = holder_script.__file__
LIVE_EDGE = 2**62  # a from_sequence beyond the log: only what comes next
WARM_UP_TURN = [{"do": "text", "text": "ready"}]
START_TIMEOUT_S = 30.0
DAEMON_EVENTS = frozenset({"input_lock", "status_change", "user_input"})


@dataclass(frozen=True)
class DaemonOptions:
    profile: Path | None = None  # run under cProfile, leaving <profile>/<phase>.prof
    event_loop: str | None = None  # BETCODE_EVENT_LOOP for the daemon (None: its default)
    otlp_endpoint: str | None = None  # observability on, traces to this OTLP/HTTP sink
    python_path: Path | None = None  # first on the daemon's PYTHONPATH (another betcode)
    grpc_server: str | None = None  # daemon.grpc.server (None: the default)


class DaemonProcess:
    """`betcode daemon start --foreground` in a child process, with a fake claude."""

    def __init__(self, root: Path, turn: list[dict[str, Any]], options: DaemonOptions) -> None:
        self.root = root
        self.socket = root / "sock" / "daemon.sock"
        (root / "repo").mkdir(parents=True)
        # Turn 0 starts claude untimed; every later turn is the measured one.
        fake = make_fake_claude(root / "fake", {"turns": [WARM_UP_TURN, turn]})
        argv = [sys.executable]
        if options.profile is not None:
            argv += ["-m", "cProfile", "-o", str(options.profile / f"{root.name}.prof")]
        self.argv = [
            *argv,
            str(DAEMON_SCRIPT),
            str(self.socket),
            str(root / "data"),
            str(root / "config"),
            str(fake),
        ]
        self.environ = dict(os.environ)
        if options.event_loop is not None:
            self.environ["BETCODE_EVENT_LOOP"] = options.event_loop
        if options.otlp_endpoint is not None:
            self.environ["BENCH_OTLP_ENDPOINT"] = options.otlp_endpoint
        if options.python_path is not None:
            self.environ["PYTHONPATH"] = str(options.python_path)
        if options.grpc_server is not None:
            self.environ["BENCH_GRPC_SERVER"] = options.grpc_server
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        log = self.root / "daemon.log"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv, stdout=fd, stderr=fd, env=self.environ
            )
        finally:
            os.close(fd)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.socket.exists():
            if self.process.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not start; see {log}")
            await asyncio.sleep(0.05)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), 20)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


class Driver:
    """This process's client: creates sessions, sends messages, times turns."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        options = (("grpc.max_receive_message_length", 64 * 1024 * 1024),)
        self.channel = grpc.aio.insecure_channel(f"unix:{daemon.socket}", options=options)
        self.stub = agent_pb2_grpc.AgentServiceStub(self.channel)

    async def _converse(self, start: agent_pb2.StartConversation, send: bool) -> Any:
        """Converse until the answer's first sign: session_info, or with `send` the first
        event claude produced for the message (cancelling earlier could cancel its delivery)."""
        requests = [agent_pb2.AgentRequest(start=start)]
        if send:
            message = agent_pb2.UserMessage(content="go")
            requests.append(agent_pb2.AgentRequest(message=message))
        call = self.stub.Converse(iter(requests), metadata=(("x-client-id", "driver"),))
        sent = not send
        try:
            async for event in call:
                kind = event.WhichOneof("event")
                if kind == "user_input":
                    sent = True
                elif sent and kind not in DAEMON_EVENTS:
                    return event
            raise RuntimeError("Converse ended before claude answered")
        finally:
            call.cancel()

    async def new_session(self) -> str:
        start = agent_pb2.StartConversation(working_directory=str(self.daemon.root / "repo"))
        event = await self._converse(start, send=False)
        return str(event.session_info.session_id)

    async def send(self, session_id: str) -> None:
        """Returns once claude answered the message."""
        start = agent_pb2.StartConversation(session_id=session_id, from_sequence=LIVE_EDGE)
        await self._converse(start, send=True)

    async def turn(self, session_id: str) -> tuple[int, float]:
        """(TurnComplete seq, seconds from sending to it arriving on a batched stream)."""
        request = agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=LIVE_EDGE)
        stream = self.stub.ResumeSessionBatched(request)
        try:
            batches = stream.__aiter__()
            while (await anext(batches)).events:  # the empty batch: subscribed, at the edge
                pass
            started = time.perf_counter()
            await self.send(session_id)
            async for batch in batches:
                for event in batch.events:
                    if event.WhichOneof("event") == "turn_complete":
                        return event.sequence, time.perf_counter() - started
            raise RuntimeError("the stream ended before turn_complete")
        finally:
            stream.cancel()

    async def replay(self, session_id: str) -> tuple[int, float]:
        """(events, seconds) to replay a whole session on the batched stream."""
        started = time.perf_counter()
        request = agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=0)
        stream = self.stub.ResumeSessionBatched(request)
        replayed = 0
        async for batch in stream:
            if not batch.events:  # the live edge
                break
            replayed += len(batch.events)
        stream.cancel()
        return replayed, time.perf_counter() - started


class ClientProcesses:
    """bench_clients.py processes; each job's streams are spread over them."""

    def __init__(self, socket: Path, count: int) -> None:
        self.socket = socket
        self.count = count
        self.processes: list[asyncio.subprocess.Process] = []
        self.busy: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        for _ in range(self.count):
            self.processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    str(CLIENTS_SCRIPT),
                    str(self.socket),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    limit=256 * 1024 * 1024,
                )
            )

    async def attach(self, job: dict[str, Any], streams: int) -> None:
        """Send `job` with a share of `streams`; return once every stream is subscribed."""
        self.busy = []
        for index, process in enumerate(self.processes):
            share = streams // self.count + (1 if index < streams % self.count else 0)
            if share:
                self._send(process, {**job, "streams": share})
                self.busy.append(process)
        for process in self.busy:
            await self._reply(process)

    async def results(self) -> list[dict[str, Any]]:
        return [await self._reply(process) for process in self.busy]

    async def release(self) -> None:
        for process in self.busy:
            self._send(process, {"op": "release"})

    async def stop(self) -> None:
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.close()
        for process in self.processes:
            await process.wait()

    @staticmethod
    def _send(process: asyncio.subprocess.Process, job: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps(job).encode() + b"\n")

    @staticmethod
    async def _reply(process: asyncio.subprocess.Process) -> dict[str, Any]:
        assert process.stdout is not None
        line = await process.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark client {process.pid} exited")
        reply: dict[str, Any] = json.loads(line)
        return reply


@asynccontextmanager
async def bench_daemon(
    root: Path, turn: list[dict[str, Any]], options: DaemonOptions
) -> AsyncIterator[tuple[DaemonProcess, Driver, ClientProcesses]]:
    daemon = DaemonProcess(root, turn, options)
    await daemon.start()
    driver = Driver(daemon)
    clients = ClientProcesses(daemon.socket, CLIENT_PROCESSES)
    await clients.start()
    try:
        yield daemon, driver, clients
    finally:
        await clients.stop()
        await driver.channel.close()
        await daemon.stop()


def loop_thread_cpu_seconds(pid: int) -> float:
    """CPU of the daemon's main thread, which runs its event loop (Linux /proc)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def holder_processes(daemon_pid: int) -> list[int]:
    """The daemon's holders (claude/holder/holder.py): processes of their own on the path."""
    children = psutil.Process(daemon_pid).children(recursive=True)
    return [child.pid for child in children if HOLDER_SCRIPT in child.cmdline()]


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def ingest_and_replay(root: Path, lines: int, options: DaemonOptions) -> dict[str, float]:
    turn = [{"do": "flood", "lines": lines, "text": "x"}]
    async with bench_daemon(root, turn, options) as (daemon, driver, _):
        session_id = await driver.new_session()
        await driver.turn(session_id)
        cpu = cpu_seconds(daemon.pid)
        _, elapsed = await driver.turn(session_id)
        cpu = cpu_seconds(daemon.pid) - cpu
        replayed, replay_s = await driver.replay(session_id)
    return {
        "ingest_lines_per_s": lines / elapsed,
        "ingest_daemon_cpu_percent": 100 * cpu / elapsed,
        "ingest_daemon_cpu_us_per_line": 1e6 * cpu / lines,
        "replay_100k_s": replay_s * 100_000 / replayed,
        "replayed_events": replayed,
    }


async def fan_out(
    driver: Driver,
    clients: ClientProcesses,
    session_id: str,
    lines: int,
    count: int,
    batched: bool,
) -> float:
    after, _ = await driver.turn(session_id)  # the previous turn's end is the baseline
    job = {"op": "watch", "session": session_id, "after": after, "batched": batched}
    await clients.attach(job, count)
    started = time.monotonic_ns()
    await driver.send(session_id)
    results = await clients.results()
    counts: list[int] = [count for result in results for count in result["counts"]]
    if len(set(counts)) != 1 or counts[0] < lines:
        raise RuntimeError(f"clients saw different event counts for one turn: {set(counts)}")
    events = sum(counts)
    done: int = max(result["done_ns"] for result in results)
    return events / ((done - started) / 1e9)


async def broadcast(
    root: Path, lines: int, counts: list[int], options: DaemonOptions
) -> dict[str, float]:
    # Every turn floods: fan_out's baseline turn is one more flood, untimed.
    figures: dict[str, float] = {}
    turn = [{"do": "flood", "lines": lines, "text": "x"}]
    async with bench_daemon(root, turn, options) as (_, driver, clients):
        session_id = await driver.new_session()
        for batched in (False, True):
            for count in counts:
                name = f"{'batched' if batched else 'broadcast'}_{count}_clients_events_per_s"
                figures[name] = await fan_out(driver, clients, session_id, lines, count, batched)
    return figures


async def latency(
    root: Path, lines: int, clients_count: int, options: DaemonOptions
) -> dict[str, float]:
    turn = [{"do": "flood", "lines": lines, "text": "x", "rate": 1000, "stamp": True}]
    async with bench_daemon(root, turn, options) as (daemon, driver, clients):
        session_id = await driver.new_session()
        after, _ = await driver.turn(session_id)
        job = {"op": "watch", "session": session_id, "after": after, "batched": False}
        await clients.attach({**job, "stamps": True}, clients_count)
        holders = holder_processes(daemon.pid)
        cpu = cpu_seconds(daemon.pid)
        loop_cpu = loop_thread_cpu_seconds(daemon.pid)
        holder_cpu = sum(cpu_seconds(pid) for pid in holders)
        started = time.perf_counter()
        await driver.send(session_id)
        results = await clients.results()
        cpu = cpu_seconds(daemon.pid) - cpu
        loop_cpu = loop_thread_cpu_seconds(daemon.pid) - loop_cpu
        holder_cpu = sum(cpu_seconds(pid) for pid in holders) - holder_cpu
        elapsed = time.perf_counter() - started
        db_path = daemon.root / "data" / "daemon.db"
        written = line_write_times(db_path, session_id)
        source_lines = dict(event_source_lines(db_path, session_id))
    delays = sorted(
        (arrived - written[source_lines[seq]][0]) / 1e6
        for result in results
        for seq, arrived in result["arrivals"]
        if source_lines.get(seq) in written
    )
    # The daemon stamps a line's row with time.time() when it reads it.
    clock_offset_ns = time.time_ns() - time.monotonic_ns()
    reads = sorted((read_s * 1e9 - clock_offset_ns - ts) / 1e6 for ts, read_s in written.values())
    deliveries = sum(len(result["arrivals"]) for result in results)
    return {
        "latency_p50_ms": statistics.median(delays),
        "latency_p99_ms": percentile(delays, 0.99),
        "latency_max_ms": delays[-1],
        "latency_samples": len(delays),
        "latency_line_read_p50_ms": statistics.median(reads),
        "latency_line_read_p99_ms": percentile(reads, 0.99),
        "latency_daemon_cpu_percent": 100 * cpu / elapsed,
        "latency_daemon_cpu_us_per_delivery": 1e6 * cpu / deliveries,
        "latency_daemon_loop_thread_cpu_percent": 100 * loop_cpu / elapsed,
        "latency_holder_cpu_us_per_line": 1e6 * holder_cpu / lines,
    }


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def line_write_times(db_path: Path, session_id: str) -> dict[int, tuple[int, float]]:
    """line seq -> (the fake's CLOCK_MONOTONIC write time in ns, the row's created_at)."""
    with sqlite3.connect(db_path) as db:
        rows = db.execute(
            "SELECT sequence, payload, created_at FROM messages"
            " WHERE session_id = ? AND payload LIKE ?",
            (session_id, '%"fake_ts_ns"%'),
        ).fetchall()
    return {seq: (json.loads(payload)["fake_ts_ns"], created) for seq, payload, created in rows}


def event_source_lines(db_path: Path, session_id: str) -> list[tuple[int, int]]:
    with sqlite3.connect(db_path) as db:
        return db.execute(
            "SELECT sequence, message_sequence FROM events"
            " WHERE session_id = ? AND message_sequence IS NOT NULL",
            (session_id,),
        ).fetchall()


async def resident_memory(root: Path, sessions: int, count: int, options: DaemonOptions) -> float:
    async with bench_daemon(root, [{"do": "text", "text": "hi"}], options) as (
        daemon,
        driver,
        clients,
    ):
        ids = [await driver.new_session() for _ in range(sessions)]
        await asyncio.gather(*(driver.turn(session_id) for session_id in ids))
        await clients.attach({"op": "hold", "sessions": ids}, count)
        rss = psutil.Process(daemon.pid).memory_info().rss / 2**20
        await clients.release()
        return rss


def machine() -> dict[str, Any]:
    return {
        "uname": " ".join(platform.uname()),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_average_before": os.getloadavg(),
    }


async def run(quick: bool, options: DaemonOptions) -> dict[str, Any]:
    lines = 20_000 if quick else 100_000
    fan_lines = 2_000 if quick else 10_000
    about = machine()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ingest = await ingest_and_replay(root / "ingest", lines, options)
        fan = await broadcast(root / "fanout", fan_lines, [1, 10, 100], options)
        latency_lines = 2_000 if quick else 5_000
        delays = await latency(root / "latency", latency_lines, 10, options)
        on_asyncio = replace(options, event_loop="asyncio")
        delays_asyncio = await latency(root / "latency-asyncio", latency_lines, 10, on_asyncio)
        rss = await resident_memory(root / "rss", 20, 100, options)
    per_event = [v for k, v in fan.items() if k.startswith("broadcast_")]
    batched = [v for k, v in fan.items() if k.startswith("batched_")]
    figures = {
        "ingest_lines_per_s": ingest["ingest_lines_per_s"],
        "broadcast_events_per_s": max(per_event),
        "batched_events_per_s": max(batched),
        "latency_p50_ms": delays["latency_p50_ms"],
        "latency_p99_ms": delays["latency_p99_ms"],
        "replay_100k_s": ingest["replay_100k_s"],
        "rss_mb": rss,
        **ingest,
        **delays,
        **{f"{k}_asyncio_loop": v for k, v in delays_asyncio.items()},
        **fan,
    }
    rounded = {k: round(v, 3) if v < 100 else round(v) for k, v in figures.items()}
    about["load_average_after"] = os.getloadavg()
    return {**rounded, "quick": quick, "machine": about}


async def latency_runs(quick: bool, repeat: int, options: DaemonOptions) -> dict[str, Any]:
    lines = 2_000 if quick else 5_000
    about = machine()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for run_index in range(repeat):
            figures = await latency(Path(tmp) / f"latency-{run_index}", lines, 10, options)
            shown = " ".join(f"{k.removeprefix('latency_')}={v:.3g}" for k, v in figures.items())
            print(f"run {run_index + 1}: {shown}", flush=True)
            runs.append({k: round(v, 3) for k, v in figures.items()})
    about["load_average_after"] = os.getloadavg()
    return {"quick": quick, "runs": runs, "machine": about}


class OtlpSink:
    """An OTLP/HTTP endpoint that accepts every export (and counts the bytes), on a thread of
    the driver: the daemon's exporter does its real work, the collector's cost is not counted."""

    def __init__(self) -> None:
        self.received_bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                sink.received_bytes += len(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


OVERHEAD_FIGURES = (
    "ingest_lines_per_s",
    "ingest_daemon_cpu_us_per_line",
    "latency_p50_ms",
    "latency_p99_ms",
    "latency_daemon_cpu_us_per_delivery",
)


async def ingest_and_latency(root: Path, quick: bool, options: DaemonOptions) -> dict[str, float]:
    lines = 20_000 if quick else 100_000
    ingest = await ingest_and_replay(root / "ingest", lines, options)
    delays = await latency(root / "latency", 2_000 if quick else 5_000, 10, options)
    cpu = ingest["ingest_daemon_cpu_us_per_line"]
    return {
        "ingest_lines_per_s": ingest["ingest_lines_per_s"],
        "ingest_daemon_cpu_us_per_line": cpu,
        **delays,
    }


Measure = Callable[[Path, bool, DaemonOptions], Awaitable[dict[str, float]]]


async def compare(
    variants: dict[str, DaemonOptions],
    measure: Measure,
    figures: tuple[str, ...],
    quick: bool,
    repeat: int,
) -> dict[str, Any]:
    """``measure`` for each variant in turn, ``repeat`` rounds; each figure's median per variant
    and its ratio to the first variant's."""
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(repeat):
            for label, options in variants.items():
                measured = await measure(Path(tmp) / f"{label}-{index}", quick, options)
                runs[label].append(measured)
                shown = " ".join(f"{key}={measured[key]:.4g}" for key in figures)
                print(f"{label}, run {index + 1}: {shown}", flush=True)
    first, *others = variants
    summary: dict[str, dict[str, float]] = {}
    for key in figures:
        medians = {label: statistics.median(run[key] for run in runs[label]) for label in runs}
        summary[key] = {label: round(value, 3) for label, value in medians.items()}
        for label in others:
            summary[key][f"{label}/{first}"] = round(medians[label] / medians[first], 3)
    about = machine()
    about["load_average_after"] = os.getloadavg()
    return {"quick": quick, "repeat": repeat, "figures": summary, "runs": runs, "machine": about}


async def observability_overhead(
    quick: bool, repeat: int, options: DaemonOptions
) -> dict[str, Any]:
    """Ingest and latency with observability off and on, alternating; medians and ratios."""
    sink = OtlpSink()
    on = replace(options, otlp_endpoint=sink.endpoint)
    try:
        variants = {"off": options, "on": on}
        result = await compare(variants, ingest_and_latency, OVERHEAD_FIGURES, quick, repeat)
    finally:
        sink.close()
    return {**result, "otlp_bytes": sink.received_bytes}


TRANSPORT_FIGURES = (
    "latency_daemon_cpu_us_per_delivery",
    "latency_p50_ms",
    "latency_p99_ms",
    "broadcast_10_clients_events_per_s",
    "batched_10_clients_events_per_s",
)


async def streaming(root: Path, quick: bool, options: DaemonOptions) -> dict[str, float]:
    delays = await latency(root / "latency", 2_000 if quick else 5_000, 10, options)
    fan = await broadcast(root / "fanout", 2_000 if quick else 10_000, [10], options)
    return {**delays, **fan}


def transport_at(revision: str, into: Path) -> Path:
    """A copy of today's betcode package with the HTTP/2 transport of git ``revision``; the
    directory to put first on PYTHONPATH. Today's app.py hands the transport its limits, which
    a transport from before them does not take: that field is added, unused."""
    repository = Path(__file__).resolve().parents[1]
    package = repository / "src" / "betcode"
    shutil.copytree(package, into / "betcode", ignore=shutil.ignore_patterns("__pycache__"))
    http2 = into / "betcode" / "server" / "http2"
    shutil.rmtree(http2)
    http2.mkdir()
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{revision}:src/betcode/server/http2"],
        cwd=repository,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in listed:
        source = subprocess.run(
            ["git", "show", f"{revision}:src/betcode/server/http2/{name}"],
            cwd=repository,
            check=True,
            capture_output=True,
        ).stdout
        (http2 / name).write_bytes(source)
    connection = http2 / "connection.py"
    text = connection.read_text()
    if "limits:" not in text:
        field = "    max_concurrent_streams: int = 1000\n"
        if field not in text:
            raise SystemExit(f"{revision}'s transport settings are not the expected ones")
        connection.write_text(text.replace(field, field + "    limits: object = None\n"))
    return into


async def transport_before_after(
    revision: str, with_grpcio: bool, quick: bool, repeat: int, options: DaemonOptions
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        before = replace(options, python_path=transport_at(revision, Path(tmp)))
        variants = {"before": before, "after": options}
        if with_grpcio:
            variants["grpcio"] = replace(options, grpc_server="grpcio")
        result = await compare(variants, streaming, TRANSPORT_FIGURES, quick, repeat)
    return {**result, "before": revision}


def print_comparison(result: dict[str, Any]) -> None:
    for key, values in result["figures"].items():
        print(f"{key:40} " + " ".join(f"{label} {value:>10}" for label, value in values.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs, under a minute")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    parser.add_argument("--profile", type=Path, help="run the daemons under cProfile, into DIR")
    parser.add_argument("--latency-only", action="store_true", help="only the latency phase")
    parser.add_argument("--repeat", type=int, default=1, help="with --latency-only: N runs")
    parser.add_argument("--event-loop", choices=("uvloop", "asyncio"), help="the daemon's loop")
    parser.add_argument(
        "--observability", action="store_true", help="ingest and latency, observability off vs on"
    )
    parser.add_argument(
        "--transport-before",
        metavar="REV",
        help="streaming figures with the HTTP/2 transport of git revision REV, then today's",
    )
    parser.add_argument(
        "--with-grpcio", action="store_true", help="with --transport-before: grpcio's server too"
    )
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        args.profile = args.profile.absolute()
    options = DaemonOptions(profile=args.profile, event_loop=args.event_loop)
    if args.observability or args.transport_before:
        repeat = max(args.repeat, 3)
        if args.observability:
            result = asyncio.run(observability_overhead(args.quick, repeat, options))
        else:
            result = asyncio.run(
                transport_before_after(
                    args.transport_before, args.with_grpcio, args.quick, repeat, options
                )
            )
        print_comparison(result)
        if args.json:
            print(json.dumps(result))
        return
    if args.latency_only:
        series = asyncio.run(latency_runs(args.quick, args.repeat, options))
        if args.json:
            print(json.dumps(series))
        return
    figures = asyncio.run(run(args.quick, options))
    for key, value in figures.items():
        if key != "machine":
            print(f"{key:50} {value}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
