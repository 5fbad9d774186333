"""How long a graceful stop takes while clients hold streams open.

    .venv/bin/python benchmarks/bench_graceful_stop.py [--runs N] [--streams K]

Each run starts a real `betcode daemon start --foreground` (the pinned claude, its own temporary
config, data and socket directories), opens one session with a Converse and K-1 ResumeSession
follow streams on it, then sends SIGUSR2 (`daemon restart`'s stop: sessions kept under their
holders) or SIGTERM (`daemon stop`) and times from the signal to the process's exit, and for
how long the streams stayed open after it. The median and the worst of the runs are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc

from betcode.v1 import agent_pb2, agent_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
CLAUDE_BIN = ROOT / "tools/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
START_TIMEOUT_SECONDS = 60.0


def serving(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as client:
        try:
            client.connect(str(sock))
        except OSError:
            return False
        return True


def one_run(signal_number: int, streams: int) -> tuple[float, float]:
    """(signal → exit, signal → the last stream ended), in seconds."""
    with tempfile.TemporaryDirectory(prefix="bgs-") as tmp:
        root = Path(tmp)
        sock = root / "d.sock"
        env = {
            **os.environ,
            "BETCODE_SOCKET": str(sock),
            "BETCODE_DATA_DIR": str(root / "data"),
            "BETCODE_CONFIG_DIR": str(root / "config"),
            "BETCODE_CLAUDE_BIN": str(CLAUDE_BIN),
            "HOME": str(root),
        }
        daemon = subprocess.Popen(
            [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while not serving(sock):
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise RuntimeError("the daemon did not start")
                time.sleep(0.05)
            return _stop_with_streams(daemon, sock, root, signal_number, streams)
        finally:
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
            _end_left_holders(root / "data" / "holders")


def _end_left_holders(holders: Path) -> None:
    """A restart's stop leaves each claude under its holder, for a next daemon that does not
    come here: both are ended, by the pids their holder.json names."""
    for facts_file in holders.glob("*/holder.json"):
        facts = json.loads(facts_file.read_text())
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(facts["claude_pid"]), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(facts["holder_pid"]), signal.SIGKILL)


def _stop_with_streams(
    daemon: subprocess.Popen[bytes], sock: Path, root: Path, signal_number: int, streams: int
) -> tuple[float, float]:
    channel = grpc.insecure_channel(f"unix:{sock}")
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    opened = threading.Event()
    stop_requests = threading.Event()
    session: list[str] = []
    ended: list[float] = []

    def requests() -> Iterator[agent_pb2.AgentRequest]:
        yield agent_pb2.AgentRequest(start=agent_pb2.StartConversation(working_directory=str(root)))
        stop_requests.wait()

    def converse() -> None:
        call = stub.Converse(requests(), metadata=(("x-client-id", "bench-0"),))
        try:
            for event in call:
                if event.WhichOneof("event") == "session_info" and not session:
                    session.append(event.session_info.session_id)
                    opened.set()
        except grpc.RpcError:
            pass
        ended.append(time.monotonic())

    def watch(number: int) -> None:
        request = agent_pb2.ResumeSessionRequest(session_id=session[0], follow=True)
        try:
            for _event in stub.ResumeSession(
                request, metadata=(("x-client-id", f"bench-{number}"),)
            ):
                pass
        except grpc.RpcError:
            pass
        ended.append(time.monotonic())

    threads = [threading.Thread(target=converse, daemon=True)]
    threads[0].start()
    if not opened.wait(30):
        raise RuntimeError("no session_info")
    for number in range(1, streams):
        thread = threading.Thread(target=watch, args=(number,), daemon=True)
        thread.start()
        threads.append(thread)
    time.sleep(0.5)  # every stream attached
    signalled = time.monotonic()
    daemon.send_signal(signal_number)
    daemon.wait(60)
    exited = time.monotonic()
    if daemon.returncode != 0:
        raise RuntimeError(f"the daemon exited {daemon.returncode}")
    for thread in threads:
        thread.join(10)
    stop_requests.set()
    channel.close()
    return exited - signalled, max(ended, default=exited) - signalled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--streams", type=int, default=3)
    args = parser.parse_args()
    for name, number in (("restart (SIGUSR2)", signal.SIGUSR2), ("stop (SIGTERM)", signal.SIGTERM)):
        runs = [one_run(number, args.streams) for _ in range(args.runs)]
        exits = [run[0] for run in runs]
        streams = [run[1] for run in runs]
        print(
            f"{name}, {args.streams} streams: exit after {statistics.median(exits):.2f} s "
            f"(worst {max(exits):.2f}), streams ended after {statistics.median(streams):.2f} s "
            f"(worst {max(streams):.2f})"
        )


if __name__ == "__main__":
    main()
