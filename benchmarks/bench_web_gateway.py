"""What the web gateway costs a page: the web client's API and stream on the LAN, through the
gateway on the daemon's own socket, and through the relay (sealed end to end), side by side.

    .venv/bin/python benchmarks/bench_web_gateway.py [--quick] [--json]

One relay in this process (its own nats-server), one daemon in this process on its tunnel with
its LAN web listener on loopback, running the pinned real CLI against the mock model, and one
device signed in. The relay path is the gRPC one (the CLI's `EncryptingChannel`, scheme v2),
without the relay front's WebSocket per call that a browser adds.

* fetch_sessions_ms: `GET /api/sessions`, one after another, on each path;
* stream_event_ms: the three streams of one session open at once; a message typed on a fourth
  (another LAN page); the time from sending it to the first event it makes arriving on each
  stream (the same event, fanned out: the difference is the path's).

p50 / p99 over N each (--quick: fewer). Figures are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc.aio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.relay import Rig, relay_rig
from harness.web import ApiClient, WebClient, WebStream, sign_in
from harness.web_gateway import GatewayClient
from latency_report import percentiles, run_and_print

from betcode.config.settings import DaemonSettings, HttpSettings
from betcode.web.token import read_or_create_token

PATHS = ("lan", "gateway_local", "gateway_relay")
PROMPT = 'SCN:plain {"text": "ok"} turn'


async def timed_fetches(client: ApiClient, calls: int) -> list[float]:
    for _ in range(3):  # warm: connections, the relay's routing, the e2e session
        await client.call("GET", "/api/sessions")
    timings = []
    for _ in range(calls):
        began = time.perf_counter()
        status, body = await client.call("GET", "/api/sessions")
        timings.append((time.perf_counter() - began) * 1000)
        assert status == 200, body
    return timings


async def arrival(stream: WebStream, before: int) -> float:
    await stream.until(lambda: len(stream.events) > before or None)
    return time.perf_counter()


async def timed_events(
    typing: WebStream, streams: dict[str, WebStream], turns: int
) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {name: [] for name in streams}
    for turn in range(turns):
        counts = {name: len(stream.events) for name, stream in streams.items()}
        began = time.perf_counter()
        await typing.say(f"{PROMPT} {turn}")
        arrived = await asyncio.gather(
            *(arrival(stream, counts[name]) for name, stream in streams.items())
        )
        for name, at in zip(streams, arrived, strict=True):
            timings[name].append((at - began) * 1000)
        await typing.wait_for("turn_complete", count=turn + 1)
    return timings


async def measure(rig: Rig, repo: Path, calls: int, turns: int) -> dict[str, Any]:
    rig.config = replace(rig.config, settings=DaemonSettings(http=HttpSettings("127.0.0.1:0")))
    await rig.start_daemon()
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    lan_url = rig.daemon.web.url or ""
    device = await sign_in(lan_url, read_or_create_token(rig.config.config_dir))
    credential = device["credential"]
    async with grpc.aio.insecure_channel(f"unix:{rig.config.socket_path}") as local:
        lan = WebClient(lan_url, credential, "web-bench-lan")
        typist = WebClient(lan_url, credential, "web-bench-typist")  # a page of its own
        clients: dict[str, ApiClient] = {
            "lan": lan,
            "gateway_local": GatewayClient(local, credential, "web-bench-local"),
            "gateway_relay": GatewayClient(rig.sealed, credential, "web-bench-relay", rig.metadata),
        }
        try:
            fetches = {name: await timed_fetches(client, calls) for name, client in clients.items()}
            session_id = await lan.create_session(str(repo))
            streams = {name: await client.stream(session_id) for name, client in clients.items()}
            typing = await typist.stream(session_id)
            for stream in (*streams.values(), typing):
                await asyncio.wait_for(stream.caught_up.wait(), 60)
            events = await timed_events(typing, streams, turns)
            for stream in (*streams.values(), typing):
                await stream.close()
        finally:
            await lan.close()
            await typist.close()
    return {
        **{f"fetch_sessions_ms.{name}": percentiles(fetches[name]) for name in PATHS},
        **{f"stream_event_ms.{name}": percentiles(events[name]) for name in PATHS},
    }


async def main(quick: bool) -> dict[str, Any]:
    calls, turns = (40, 8) if quick else (300, 40)
    with tempfile.TemporaryDirectory(prefix="betcode-bench-gateway-") as folder:
        async with relay_rig(Path(folder)) as (rig, workspace):
            return await measure(rig, workspace.repo, calls, turns)


if __name__ == "__main__":
    run_and_print(__doc__.splitlines()[0], main)
