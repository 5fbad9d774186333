"""The CPU a line costs on its path claude → holder → session → store writer → fan-out, without
gRPC: where run.py's latency phase spends most of the daemon's time in grpc.aio, this isolates
the rest, thread by thread and process by process.

    .venv/bin/python benchmarks/bench_session_path.py [--lines N] [--rate R] [--direct]
                                                      [--subscribers N] [--syscalls] [--json]

One process holds a real Session (store writer on a database file, checkpointer, translator)
whose claude is a paced fake (`flood` at --rate lines/s) under a holder (or, with --direct, its
own child); --subscribers hub subscribers stand in for the clients' streams (each takes its
frames as a stream would, nothing more). After an untimed warm-up turn, one turn of --lines lines
is measured. Figures, per line:

* cpu_us[<thread>]: CPU of each thread of this process (the event loop is "loop", the store
  writer "betcode-store-writer"), from /proc/self/task/*/schedstat;
* holder_cpu_us, claude_cpu_us: CPU of the holder process and of the fake claude;
* context_switches[<process>]: voluntary switches (each a wake-up: the cost on this VM);
* commits: writer commits per line (1 when each line is its own commit);
* with --syscalls (needs `perf`): system calls per line in each process, all and the kinds
  that matter here, counted by tracepoints (they add their own overhead to the CPU figures).

Printed, never asserted (benchmarks/README.md has the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from betcode import event_loop
from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.holder.client import HolderPlace
from betcode.claude.locate import BinarySource, ClaudeBinary
from betcode.devtools.fake_claude import make_fake_claude
from betcode.protocol.messages import ControlRequest
from betcode.sessions.context import SessionContext, SessionSettings
from betcode.sessions.fanout import Frame, Subscriber
from betcode.sessions.session import Session
from betcode.sessions.turns import TurnEnd
from betcode.storage import StoreReader, StoreWriter, open_database
from betcode.storage.sessions import create_session

SYSCALLS = (
    *("futex", "pwrite64", "fcntl", "getpid", "write", "read", "sendto", "recvfrom"),
    *("mmap", "mremap", "munmap"),
)
QUEUE_FRAMES = 1_000_000  # never lagging: a stand-in client takes everything


class NoPermissions:
    """The permission gate of a session whose claude never asks."""

    async def on_control_request(self, session: Session, request: ControlRequest) -> None:
        pass

    async def on_cancel(self, session: Session, request_id: str) -> None:
        pass

    async def on_session_activity(self, session: Session) -> None:
        pass

    async def replay_frames(self, session: Session, last_seq: int) -> list[Frame]:
        return []

    def has_pending(self, session_id: str) -> bool:
        return False


def thread_cpu_ns(pid: int) -> dict[int, int]:
    cpu = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            cpu[int(task.name)] = int((task / "schedstat").read_text().split()[0])
    return cpu


def voluntary_switches(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            status = (task / "status").read_text()
            total += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return total


@contextlib.contextmanager
def syscall_counts(pids: dict[str, int], counts: dict[str, dict[str, int]]) -> Iterator[None]:
    """Counts each process's system calls (perf tracepoints) while the block runs."""
    events = {"raw_syscalls:sys_enter": "all"}
    events.update((f"syscalls:sys_enter_{name}", name) for name in SYSCALLS)
    outputs = {role: Path(tempfile.mkstemp(prefix=f"bsp-{role}-")[1]) for role in pids}
    perf_stat = ["perf", "stat", "-x,", "-e", ",".join(events)]
    perfs = [
        subprocess.Popen([*perf_stat, "-o", str(outputs[role]), "-p", str(pid)])
        for role, pid in pids.items()
    ]
    time.sleep(0.3)  # perf attached
    try:
        yield
    finally:
        for perf in perfs:
            perf.send_signal(signal.SIGINT)
            perf.wait()
        for role, output in outputs.items():
            for row in output.read_text().splitlines():
                fields = row.split(",")
                if len(fields) > 2 and fields[0].isdigit() and fields[2] in events:
                    counts.setdefault(role, {})[events[fields[2]]] = int(fields[0])
            output.unlink()


async def drain(subscriber: Subscriber) -> None:
    """A client's stream, without the transport: wakes for its frames and takes them."""
    while not subscriber.closed:
        await subscriber.wait()
        subscriber.take(256, 4 * 1024 * 1024)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bsp-") as scratch:
        root = Path(scratch)
        database = open_database(root / "daemon.db")
        writer = StoreWriter(database)
        reader = StoreReader(database)
        record = await writer.call(
            lambda c: create_session(
                c, session_id="s1", model="m", working_directory=str(root), now=time.time()
            )
        )
        flood = {"do": "flood", "lines": args.lines, "text": "x", "rate": args.rate}
        fake = make_fake_claude(root / "fake", {"turns": [[{"do": "text", "text": "hi"}], [flood]]})
        context = SessionContext(
            writer=writer,
            reader=reader,
            claude_binary=ClaudeBinary(fake, BinarySource.FLAG),
            child_env=lambda: {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch},
            process_policy=SupervisorPolicy(idle_reap_seconds=None),
            permissions=NoPermissions(),
            settings=SessionSettings(),
            holders=None if args.direct else HolderPlace(root / "holders"),
        )
        session = Session(record, context, line_seq=0, event_seq=0)
        subscribers = [
            session.hub.subscribe(f"client-{n}", QUEUE_FRAMES) for n in range(args.subscribers)
        ]
        clients = [asyncio.create_task(drain(subscriber)) for subscriber in subscribers]
        turn_over = asyncio.Event()

        def on_turn_end(end: TurnEnd) -> None:
            turn_over.set()

        session.turn_listeners.append(on_turn_end)
        try:
            await session.send_user_message(None, "warm up")
            await turn_over.wait()
            turn_over.clear()
            figures = await measured_turn(session, writer, turn_over, args)
        finally:
            await session.close()
            await asyncio.gather(*clients)
            await writer.close()
            reader.close()
    return figures


async def measured_turn(
    session: Session, writer: StoreWriter, turn_over: asyncio.Event, args: argparse.Namespace
) -> dict[str, Any]:
    me = os.getpid()
    children = {
        ("holder" if "holder.py" in " ".join(child.cmdline()) else "claude"): child.pid
        for child in psutil.Process(me).children(recursive=True)
    }
    processes = {"daemon": me, **children}
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    names[threading.main_thread().native_id or me] = "loop"
    commits = writer.health().batches_committed
    cpu_before = {role: thread_cpu_ns(pid) for role, pid in processes.items()}
    switches = {role: voluntary_switches(pid) for role, pid in processes.items()}
    syscalls: dict[str, dict[str, int]] = {}
    counting = syscall_counts(processes, syscalls) if args.syscalls else contextlib.nullcontext()
    with counting:
        await session.send_user_message(None, "go")
        await turn_over.wait()
    cpu_after = {role: thread_cpu_ns(pid) for role, pid in processes.items()}
    lines = args.lines
    per_line: dict[str, Any] = {"commits": (writer.health().batches_committed - commits) / lines}
    for tid, ns in cpu_after["daemon"].items():
        name = names.get(tid, "other").rstrip("0123456789_-")
        key = f"cpu_us[{name}]"
        per_line[key] = per_line.get(key, 0.0) + (ns - cpu_before["daemon"].get(tid, 0)) / 1e3
    for role in children:
        spent = sum(cpu_after[role].values()) - sum(cpu_before[role].values())
        per_line[f"{role}_cpu_us"] = spent / 1e3
    for role, pid in processes.items():
        per_line[f"context_switches[{role}]"] = voluntary_switches(pid) - switches[role]
    for role, counts in syscalls.items():
        for name, count in counts.items():
            if count >= lines // 20 or name == "all":
                per_line[f"syscalls[{role}][{name}]"] = count
    for key, value in per_line.items():
        if key != "commits":
            per_line[key] = value / lines
    return {key: round(value, 2) for key, value in per_line.items() if value >= 0.005}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=1000.0, help="claude's lines per second")
    parser.add_argument("--direct", action="store_true", help="claude as the daemon's child")
    parser.add_argument("--subscribers", type=int, default=10)
    parser.add_argument("--syscalls", action="store_true", help="count system calls (perf)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = event_loop.run(measure(args), event_loop.chosen_event_loop())
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:36} {value}")


if __name__ == "__main__":
    main()
