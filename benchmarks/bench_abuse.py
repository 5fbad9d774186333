"""The daemon's HTTP/2 transport under a PING flood from a client that never reads: how much the
serving process grows, before and after the transport's limits.

    .venv/bin/python benchmarks/bench_abuse.py [--pings N] [--before REV] [--json]

A server process (the daemon's transport, uvloop, no services needed) listens on a Unix socket;
a raw client sends the HTTP/2 preface and N PING frames (17 bytes each) and never reads. Once
the server has taken everything or stopped reading for 2 s, the server's RSS growth since the
client connected is printed, with what the client could not send. Two limit settings: the
default PING budget (GOAWAY after 100 PINGs in 10 s), and no budget (only backpressure: reading
stops while the unsent PING ACKs are above the high-water mark). `--before REV` runs it once
against the transport of git revision REV too (benchmarks/run.py's `transport_at`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from hyperframe.frame import PingFrame, SettingsFrame

SCRIPT = str(Path(__file__).resolve())
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + SettingsFrame(0).serialize()
QUIET_S = 2.0


async def serve(path: str, max_pings: int) -> None:
    from betcode.config.settings import GrpcSettings
    from betcode.server.app import DEFAULT_MAX_MESSAGE_BYTES
    from betcode.server.http2.connection import TransportSettings
    from betcode.server.http2.server import GrpcServer

    server = GrpcServer(
        TransportSettings(
            max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES,
            keepalive_time_s=3600,  # no keepalive drop during the measurement
            keepalive_timeout_s=3600,
            limits=GrpcSettings(max_pings_per_window=max_pings),
        )
    )
    server.bind_unix(Path(path))
    await server.start()
    await asyncio.Event().wait()


def flood(path: Path, pings: int, server: psutil.Process) -> dict[str, Any]:
    """Sends the preface and ``pings`` PINGs without reading; the server's growth."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))
    time.sleep(0.5)
    rss_before = server.memory_info().rss
    data = memoryview(PREFACE + PingFrame(0, opaque_data=b"12345678").serialize() * pings)
    client.setblocking(False)
    sent, last_progress = 0, time.monotonic()
    while sent < len(data) and time.monotonic() - last_progress < QUIET_S:
        try:
            count = client.send(data[sent : sent + 1024 * 1024])
        except BlockingIOError:
            time.sleep(0.01)
            continue
        except OSError:  # the server hung up (GOAWAY)
            break
        sent += count
        last_progress = time.monotonic()
    time.sleep(QUIET_S)  # let the server work through what it has
    grown = server.memory_info().rss - rss_before
    client.close()
    return {
        "pings_sent": max(0, (sent - len(PREFACE)) // 17),
        "server_rss_growth_mb": round(grown / 2**20, 1),
    }


def measure(pings: int, max_pings: int, python_path: Path | None) -> dict[str, Any]:
    environ = dict(os.environ)
    if python_path is not None:
        environ["PYTHONPATH"] = str(python_path)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "abuse.sock"
        process = subprocess.Popen(
            [sys.executable, SCRIPT, "--serve", str(path), str(max_pings)], env=environ
        )
        try:
            while not path.exists():
                time.sleep(0.05)
            return flood(path, pings, psutil.Process(process.pid))
        finally:
            process.terminate()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pings", type=int, default=1_000_000)
    parser.add_argument("--before", metavar="REV", help="also the transport of git REV")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        from betcode import event_loop

        loop = event_loop.chosen_event_loop()
        event_loop.run(serve(args.serve[0], int(args.serve[1])), loop)
        return
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        variants: dict[str, Path | None] = {"after": None}
        if args.before:
            from run import transport_at

            variants = {"before": transport_at(args.before, Path(tmp)), **variants}
        for label, python_path in variants.items():
            # The transport before the limits takes no budget: one run is enough.
            budgets = {"default PING budget": 100, "no PING budget": 10**9}
            if label == "before":
                budgets = {"no limits": 10**9}
            for budget, max_pings in budgets.items():
                figures = measure(args.pings, max_pings, python_path)
                results[f"{label}, {budget}"] = figures
                print(f"{label:6} {budget:20} {figures}", flush=True)
    if args.json:
        print(json.dumps({"pings": args.pings, "results": results}))


if __name__ == "__main__":
    main()
