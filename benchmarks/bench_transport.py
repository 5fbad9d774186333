"""The floor under the daemon's latency figure: the bare gRPC transport fan-out, no daemon.

    .venv/bin/python benchmarks/bench_transport.py [--quick] [--repeat N] [--json]
        [--server http2|grpc-aio] [--before REV]

A server process (uvloop, like the daemon) publishes one small message per millisecond to 10
server-streaming calls on a Unix socket, one message per stream message, as the per-event
stream does; two client processes (5 calls each, one channel per call, as benchmarks/run.py's
clients) stamp each arrival. Latency is publish → arrival, p50 / p99 over all deliveries. Run
next to `run.py --latency-only`, it tells how much of the daemon's tail is the transport and the
machine: the daemon adds claude's pipe, SQLite and the session to this path.

`--server http2` (the default) is the daemon's own transport (betcode.server.http2);
`--server grpc-aio` is grpc.aio's server, the daemon's transport until round 5.
`transport_server_cpu_us_per_delivery` is the server process's CPU while it publishes, per
message delivered. `--before REV` alternates the daemon's transport as it was at git revision
REV (benchmarks/run.py's `transport_at`) with today's, `--repeat` rounds (default 3), and prints
each figure's median before and after and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from betcode import event_loop
from betcode.server.app import DEFAULT_MAX_MESSAGE_BYTES, KEEPALIVE_TIME_S, KEEPALIVE_TIMEOUT_S
from betcode.server.http2.connection import TransportSettings
from betcode.server.http2.server import GrpcServer

METHOD = "/bench.Transport/Watch"
STREAMS = 10
PROCESSES = 2
RATE_PER_S = 1000
PAYLOAD = b"x" * 80  # about a TextDelta event
SCRIPT = str(Path(__file__).resolve())


def _identity(data: bytes) -> bytes:
    return data


async def serve(socket: str, messages: int, kind: str) -> None:
    """Waits for STREAMS calls, publishes `messages` paced messages to each, then ends them."""
    queues: list[asyncio.Queue[bytes | None]] = []
    all_attached = asyncio.Event()

    async def watch(_request: bytes, _context: grpc.aio.ServicerContext) -> Any:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        queues.append(queue)
        if len(queues) == STREAMS:
            all_attached.set()
        yield b"ready"
        while (item := await queue.get()) is not None:
            yield item

    handler = grpc.method_handlers_generic_handler(
        "bench.Transport",
        {"Watch": grpc.unary_stream_rpc_method_handler(watch, _identity, _identity)},
    )
    server: Any
    if kind == "http2":
        server = GrpcServer(
            TransportSettings(
                max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES,
                keepalive_time_s=KEEPALIVE_TIME_S,
                keepalive_timeout_s=KEEPALIVE_TIMEOUT_S,
            )
        )
        server.add_generic_rpc_handlers((handler,))
        server.bind_unix(Path(socket))
    else:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"unix:{socket}")
    await server.start()
    await all_attached.wait()
    cpu_at_start = time.process_time()
    started = time.monotonic()
    for number in range(messages):
        ahead = started + number / RATE_PER_S - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
        frame = struct.pack("<Q", time.monotonic_ns()) + PAYLOAD
        for queue in queues:
            queue.put_nowait(frame)
    for queue in queues:
        queue.put_nowait(None)
    await server.stop(5)
    print(json.dumps({"cpu_s": time.process_time() - cpu_at_start}))


async def watch(socket: str, streams: int) -> None:
    """Client process: `streams` calls; prints the delays (ms) of everything received."""

    async def one() -> list[float]:
        async with grpc.aio.insecure_channel(
            f"unix:{socket}", options=(("grpc.use_local_subchannel_pool", 1),)
        ) as channel:
            call = channel.unary_stream(METHOD, _identity, _identity)(b"")
            delays = []
            async for message in call:
                now = time.monotonic_ns()
                if message != b"ready":
                    delays.append((now - struct.unpack_from("<Q", message)[0]) / 1e6)
            return delays

    results = await asyncio.gather(*(one() for _ in range(streams)))
    print(json.dumps([delay for delays in results for delay in delays]))


async def measure(messages: int, kind: str, python_path: Path | None = None) -> dict[str, float]:
    """One run; ``python_path`` goes first on the server's PYTHONPATH (another betcode)."""
    environ = dict(os.environ)
    if python_path is not None:
        environ["PYTHONPATH"] = str(python_path)
    with tempfile.TemporaryDirectory() as tmp:
        socket = Path(tmp) / "transport.sock"
        server = await asyncio.create_subprocess_exec(
            *(sys.executable, SCRIPT, "--serve", str(socket), str(messages), kind),
            stdout=asyncio.subprocess.PIPE,
            env=environ,
        )
        await wait_for_socket(socket)
        clients = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                SCRIPT,
                "--watch",
                str(socket),
                str(STREAMS // PROCESSES),
                stdout=asyncio.subprocess.PIPE,
                limit=64 * 1024 * 1024,
            )
            for _ in range(PROCESSES)
        ]
        outputs = [await client.communicate() for client in clients]
        served, _ = await server.communicate()
    delays = sorted(delay for out, _ in outputs for delay in json.loads(out))
    cpu_s = json.loads(served)["cpu_s"]
    return {
        "transport_p50_ms": round(statistics.median(delays), 3),
        "transport_p99_ms": round(delays[int(len(delays) * 0.99)], 3),
        "transport_max_ms": round(delays[-1], 3),
        "transport_samples": len(delays),
        "transport_server_cpu_us_per_delivery": round(1e6 * cpu_s / len(delays), 3),
    }


async def before_after(revision: str, messages: int, repeat: int) -> dict[str, Any]:
    """Today's transport against REV's, alternating; medians and after/before ratios."""
    from run import transport_at  # here: the server and client processes need none of run.py

    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        overlay = transport_at(revision, Path(tmp))
        for index in range(repeat):
            for label, python_path in (("before", overlay), ("after", None)):
                figures = await measure(messages, "http2", python_path)
                shown = " ".join(f"{k}={v}" for k, v in figures.items())
                print(f"{label}, run {index + 1}: {shown}", flush=True)
                runs[label].append(figures)
    summary: dict[str, dict[str, float]] = {}
    for key in FIGURES:
        before = statistics.median(run[key] for run in runs["before"])
        after = statistics.median(run[key] for run in runs["after"])
        summary[key] = {"before": before, "after": after, "after/before": round(after / before, 3)}
        print(f"{key:40} before {before:>10} after {after:>10} after/before {after / before:.3f}")
    return {"before": revision, "figures": summary, "runs": runs}


FIGURES = ("transport_server_cpu_us_per_delivery", "transport_p50_ms", "transport_p99_ms")


async def wait_for_socket(socket: Path) -> None:
    """The server process binds its socket once it is ready for the clients."""
    exists = await asyncio.to_thread(socket.exists)
    while not exists:
        await asyncio.sleep(0.02)
        exists = await asyncio.to_thread(socket.exists)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 messages instead of 5,000")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    parser.add_argument(
        "--server", choices=("http2", "grpc-aio"), default="http2", help="which server transport"
    )
    parser.add_argument("--before", metavar="REV", help="REV's transport against today's")
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--watch", nargs=2, metavar=("SOCKET", "STREAMS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        socket, messages, kind = args.serve
        event_loop.run(serve(socket, int(messages), kind), event_loop.chosen_event_loop())
        return
    if args.watch:
        asyncio.run(watch(args.watch[0], int(args.watch[1])))
        return
    messages = 2_000 if args.quick else 5_000
    if args.before:
        result = asyncio.run(before_after(args.before, messages, max(args.repeat, 3)))
        if args.json:
            print(json.dumps({**result, "load_average_after": os.getloadavg()}))
        return
    runs = []
    for run_index in range(args.repeat):
        figures = asyncio.run(measure(messages, args.server))
        print(f"run {run_index + 1}: " + " ".join(f"{k}={v}" for k, v in figures.items()))
        runs.append(figures)
    if args.json:
        print(json.dumps({"runs": runs, "load_average_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
