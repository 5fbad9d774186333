"""The per-event streams as an independent client sees them (issue 16).

    .venv/bin/python benchmarks/bench_compat_streams.py [--quick] [--repeat N] [--json]

The daemon runs in its own process (bench_daemon.py, fake claude children); every client is a
separate process that uses nothing but plain grpc.aio and the generated stubs, and decodes
every event (each AgentEvent is parsed by the stub, and its kind read), as a client written
from the .proto files would:

* replay_events_per_s: a session of one 50,000-delta turn (about 50,000 events) replayed
  with `ResumeSession{from_sequence: 0}` until the stream ends; events / seconds from the
  call to the end, in the client process;
* fanout_events_per_s: 5 client processes, each on `ResumeSession{follow: true}` from the
  previous turn's end, watch one 50,000-delta turn; events delivered to all of them / seconds
  from sending the message until the last client saw its TurnComplete.

Each figure also gives the CPU per event of the daemon and of the clients, and the client's
voluntary context switches per event (its threads handing each message to one another: the
grpc.aio client wakes its completion-queue thread and its event loop for every message).
`--quick` uses 10,000-delta turns. Figures are printed, never asserted.

Two more replays of the same events, to show where the limit is:

* grpc_aio_replay_events_per_s: the same client against a bare grpc.aio server (uvloop, no
  daemon, no SQLite) yielding the session's stored events, the transport the daemon used
  before its own (one write per message); with --grpc-js also
  grpc_aio_to_grpc_js_replay_events_per_s, that server read by the grpc-js client;
* replay_one_cpu_events_per_s: the same client against the daemon, with the client process
  confined to one CPU (sched_setaffinity), so its threads hand messages to one another on one
  core instead of waking the other one;
* preframed_replay_events_per_s: the same client against the fastest a server can send these
  events: a bare HTTP/2 server (h2, one process, no gRPC library) that holds the whole answer
  framed in advance and sends it as fast as the client's flow-control window opens. What the
  client reaches here is its own ceiling, whatever server it reads.

`--grpc-js` adds the same replay and fan-out with clients on another gRPC stack, @grpc/grpc-js
(benchmarks/grpc_js_client/, pinned by its lock file; Node's HTTP/2, one thread per client):
grpc_js_replay_* and grpc_js_fanout_*.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import grpc
import h2.config
import h2.connection
import h2.events
from run import DaemonOptions, DaemonProcess, Driver, cpu_seconds

from betcode import event_loop
from betcode.v1 import agent_pb2, agent_pb2_grpc

SCRIPT = str(Path(__file__).resolve())
GRPC_JS_CLIENT = Path(__file__).resolve().parent / "grpc_js_client"
PROTO_ROOT = Path(__file__).resolve().parents[1] / "proto"
FANOUT_CLIENTS = 5


# ---- the client processes: plain stubs only ----


def voluntary_switches() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


async def replay_client(address: str, session_id: str) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        request = agent_pb2.ResumeSessionRequest(session_id=session_id, from_sequence=0)
        cpu, switches = time.process_time(), voluntary_switches()
        started = time.perf_counter()
        kinds: dict[str, int] = {}
        async for event in stub.ResumeSession(request):
            kind = event.WhichOneof("event")
            kinds[kind] = kinds.get(kind, 0) + 1
        seconds = time.perf_counter() - started
        return {
            "events": sum(kinds.values()),
            "seconds": seconds,
            "cpu_s": time.process_time() - cpu,
            "switches": voluntary_switches() - switches,
        }


async def watch_client(address: str, session_id: str, after: int) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        request = agent_pb2.ResumeSessionRequest(
            session_id=session_id, from_sequence=after, follow=True
        )
        call = stub.ResumeSession(request)
        await call.initial_metadata()
        print(json.dumps({"ready": True}), flush=True)
        cpu, switches = time.process_time(), voluntary_switches()
        events = 0
        async for event in call:
            events += 1
            if event.WhichOneof("event") == "turn_complete":
                break
        call.cancel()
        return {
            "events": events,
            "done_ns": time.monotonic_ns(),
            "cpu_s": time.process_time() - cpu,
            "switches": voluntary_switches() - switches,
        }


async def serve_grpc_aio(address: str, frames: list[bytes]) -> None:
    """A bare server of AgentService/ResumeSession that yields `frames` and ends."""

    async def resume(_request: object, _context: grpc.aio.ServicerContext) -> Any:
        for frame in frames:
            yield frame

    handler = grpc.method_handlers_generic_handler(
        "betcode.v1.AgentService",
        {
            "ResumeSession": grpc.unary_stream_rpc_method_handler(
                resume, agent_pb2.ResumeSessionRequest.FromString, None
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(address)
    await server.start()
    print(json.dumps({"ready": True}), flush=True)
    await server.wait_for_termination()


class PreframedReplay(asyncio.Protocol):
    """One HTTP/2 connection that answers every call with `body`, gRPC messages framed in
    advance, sent as fast as flow control lets them go, then an OK status."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.unsent: dict[int, memoryview] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.h2.initiate_connection()
        self.flush()

    def data_received(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
                self.h2.send_headers(event.stream_id, headers)
                self.unsent[event.stream_id] = memoryview(self.body)
            elif isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        self.send_what_the_windows_allow()
        self.flush()

    def send_what_the_windows_allow(self) -> None:
        for stream_id, rest in list(self.unsent.items()):
            while rest:
                size = min(
                    len(rest),
                    self.h2.local_flow_control_window(stream_id),
                    self.h2.max_outbound_frame_size,
                )
                if size <= 0:
                    break
                self.h2.send_data(stream_id, rest[:size].tobytes())
                rest = rest[size:]
            self.unsent[stream_id] = rest
            if not rest:
                del self.unsent[stream_id]
                self.h2.send_headers(stream_id, [(b"grpc-status", b"0")], end_stream=True)

    def flush(self) -> None:
        self.transport.write(self.h2.data_to_send())


async def serve_preframed(path: str, body: bytes) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(lambda: PreframedReplay(body), path)
    print(json.dumps({"ready": True}), flush=True)
    async with server:
        await server.serve_forever()


def read_frames(path: str) -> list[bytes]:
    """The events of a file of length-prefixed frames (bare_server_replays writes it)."""
    blob = Path(path).read_bytes()
    frames, at = [], 0
    while at < len(blob):
        size = int.from_bytes(blob[at : at + 4], "little")
        frames.append(blob[at + 4 : at + 4 + size])
        at += 4 + size
    return frames


def client_main(argv: list[str]) -> None:
    role, address, session_id, *rest = argv
    if role == "grpc-aio":  # session_id: the file of length-prefixed frames to serve
        event_loop.run(serve_grpc_aio(address, read_frames(session_id)), "uvloop")
        return
    if role == "preframed":
        body = b"".join(
            b"\0" + len(frame).to_bytes(4, "big") + frame for frame in read_frames(session_id)
        )
        event_loop.run(serve_preframed(address.removeprefix("unix:"), body), "uvloop")
        return
    if role in ("replay", "replay-one-cpu"):
        if role == "replay-one-cpu":
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        result = asyncio.run(replay_client(address, session_id))
    else:
        result = asyncio.run(watch_client(address, session_id, int(rest[0])))
    print(json.dumps(result), flush=True)


# ---- the driver ----


async def spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, SCRIPT, "--client", *args, stdout=asyncio.subprocess.PIPE
    )


async def spawn_grpc_js(role: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        "node",
        str(GRPC_JS_CLIENT / "client.js"),
        role,
        str(PROTO_ROOT),
        *args,
        stdout=asyncio.subprocess.PIPE,
    )


def install_grpc_js_client() -> None:
    """The pinned @grpc/grpc-js client, from its lock file (once)."""
    if not (GRPC_JS_CLIENT / "node_modules").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=GRPC_JS_CLIENT,
            check=True,
        )


async def final_reply(process: asyncio.subprocess.Process) -> dict[str, Any]:
    """A client's one answer, once it has exited."""
    answer = await reply(process)
    await process.wait()
    return answer


async def reply(process: asyncio.subprocess.Process) -> dict[str, Any]:
    assert process.stdout is not None
    line = await process.stdout.readline()
    if not line:
        raise RuntimeError(f"client {process.pid} exited without an answer")
    answer: dict[str, Any] = json.loads(line)
    return answer


async def replay(daemon: DaemonProcess, session_id: str, role: str = "replay") -> dict[str, float]:
    cpu = cpu_seconds(daemon.pid)
    result = await final_reply(await spawn(role, f"unix:{daemon.socket}", session_id))
    daemon_cpu = cpu_seconds(daemon.pid) - cpu
    events = result["events"]
    name = role.replace("-", "_")
    return {
        f"{name}_events": events,
        f"{name}_events_per_s": events / result["seconds"],
        f"{name}_client_cpu_us_per_event": 1e6 * result["cpu_s"] / events,
        f"{name}_client_switches_per_event": result["switches"] / events,
        f"{name}_daemon_cpu_us_per_event": 1e6 * daemon_cpu / events,
    }


async def grpc_js_replay(daemon: DaemonProcess, session_id: str) -> dict[str, float]:
    cpu = cpu_seconds(daemon.pid)
    result = await final_reply(await spawn_grpc_js("replay", f"unix:{daemon.socket}", session_id))
    daemon_cpu = cpu_seconds(daemon.pid) - cpu
    events = result["events"]
    return {
        "grpc_js_replay_events_per_s": events / result["seconds"],
        "grpc_js_replay_client_cpu_us_per_event": 1e6 * result["cpu_s"] / events,
        "grpc_js_replay_daemon_cpu_us_per_event": 1e6 * daemon_cpu / events,
    }


async def bare_server_replays(
    scratch: Path, db_path: Path, session_id: str, count: int, *, grpc_js: bool
) -> dict[str, float]:
    """The replay clients against the pre-framed HTTP/2 server, then a bare grpc.aio server,
    of the same `count` stored events."""
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        rows = db.execute(
            "SELECT payload FROM events WHERE session_id = ? ORDER BY sequence LIMIT ?",
            (session_id, count),
        ).fetchall()
    blob = scratch / "frames.bin"
    blob.write_bytes(b"".join(len(row[0]).to_bytes(4, "little") + row[0] for row in rows))
    figures: dict[str, float] = {}
    for server_role in ("preframed", "grpc-aio"):
        address = f"unix:{scratch / (server_role + '.sock')}"
        server = await spawn(server_role, address, str(blob))
        name = server_role.replace("-", "_")
        try:
            await reply(server)
            result = await final_reply(await spawn("replay", address, session_id))
            events = result["events"]
            figures[f"{name}_replay_events_per_s"] = events / result["seconds"]
            figures[f"{name}_replay_client_cpu_us_per_event"] = 1e6 * result["cpu_s"] / events
            figures[f"{name}_replay_client_switches_per_event"] = result["switches"] / events
            if grpc_js:
                result = await final_reply(await spawn_grpc_js("replay", address, session_id))
                rate = result["events"] / result["seconds"]
                figures[f"{name}_to_grpc_js_replay_events_per_s"] = rate
        finally:
            server.terminate()
            await server.wait()
    return figures


async def fan_out(
    daemon: DaemonProcess, driver: Driver, session_id: str, *, grpc_js: bool = False
) -> dict[str, float]:
    after, _ = await driver.turn(session_id)  # the previous turn's end
    arguments = ("watch", f"unix:{daemon.socket}", session_id, str(after))
    clients = [
        await (spawn_grpc_js(*arguments) if grpc_js else spawn(*arguments))
        for _ in range(FANOUT_CLIENTS)
    ]
    for client in clients:
        await reply(client)  # ready: the call is accepted
    cpu = cpu_seconds(daemon.pid)
    started = time.monotonic_ns()
    await driver.send(session_id)
    results = [await reply(client) for client in clients]
    for client in clients:
        await client.wait()
    daemon_cpu = cpu_seconds(daemon.pid) - cpu
    events = sum(result["events"] for result in results)
    seconds = (max(result["done_ns"] for result in results) - started) / 1e9
    name = "grpc_js_fanout" if grpc_js else "fanout"
    figures = {
        f"{name}_events": events,
        f"{name}_events_per_s": events / seconds,
        f"{name}_client_cpu_us_per_event": 1e6 * sum(r["cpu_s"] for r in results) / events,
        f"{name}_daemon_cpu_us_per_event": 1e6 * daemon_cpu / events,
    }
    if not grpc_js:
        switches = sum(r["switches"] for r in results)
        figures[f"{name}_client_switches_per_event"] = switches / events
    return figures


async def run_once(lines: int, options: DaemonOptions, grpc_js: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="betcode-compat-") as scratch:
        turn = [{"do": "flood", "lines": lines, "text": "x" * 40}]
        daemon = DaemonProcess(Path(scratch) / "daemon", turn, options)
        await daemon.start()
        driver = Driver(daemon)
        try:
            session_id = await driver.new_session()
            await driver.turn(session_id)  # claude's warm-up turn
            await driver.turn(session_id)  # the session's history: one flood
            figures = await replay(daemon, session_id)
            # Right after the daemon's replay, so that both meet the machine in the same state.
            db_path = Path(scratch) / "daemon" / "data" / "daemon.db"
            count = int(figures["replay_events"])
            figures.update(
                await bare_server_replays(
                    Path(scratch), db_path, session_id, count, grpc_js=grpc_js
                )
            )
            figures.update(await replay(daemon, session_id, "replay-one-cpu"))
            figures.update(await fan_out(daemon, driver, session_id))
            if grpc_js:
                figures.update(await grpc_js_replay(daemon, session_id))
                figures.update(await fan_out(daemon, driver, session_id, grpc_js=True))
        finally:
            await driver.channel.close()
            await daemon.stop()
        return figures


def main() -> None:
    if sys.argv[1:2] == ["--client"]:
        client_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000-delta turns")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--profile", type=Path, help="run the daemon under cProfile: DIR/daemon.prof"
    )
    parser.add_argument(
        "--grpc-js",
        action="store_true",
        help="also replay and fan out to @grpc/grpc-js clients (Node; npm ci on first use)",
    )
    args = parser.parse_args()
    lines = 10_000 if args.quick else 50_000
    options = DaemonOptions(profile=args.profile)
    if args.grpc_js:
        install_grpc_js_client()
    runs = [asyncio.run(run_once(lines, options, args.grpc_js)) for _ in range(args.repeat)]
    if args.json:
        print(json.dumps({"lines": lines, "runs": runs}, indent=2))
        return
    for name in runs[0]:
        values = [run[name] for run in runs]
        shown = " / ".join(f"{value:,.1f}" for value in values)
        median = f"  (median {statistics.median(values):,.1f})" if len(values) > 1 else ""
        print(f"{name:<44} {shown}{median}")


if __name__ == "__main__":
    main()
