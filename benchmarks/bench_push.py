"""Web Push's figure: from a permission request waiting in the daemon to its push arriving at a
push service. A daemon (`betcode daemon start --foreground --http`, fake claude children, the
loopback push setting on) in its own process; a local stand-in RFC 8030 push service here.

    .venv/bin/python benchmarks/bench_push.py [--quick] [--json]

* request_to_push_ms (p50, p99, max): the fake claude asks for a Bash permission 0.3 s into
  each turn; the page sent the turn's message and left, so nobody holds the input lock and the
  request is pushed. From the PermissionRequest event's timestamp (made in the daemon when it
  read claude's request) to the push's POST reaching the push service: the request stored,
  the push notifier woken, the payload encrypted (aes128gcm) and VAPID-signed, the POST. Both
  clocks are this machine's. The daemon pushes at most 5 an hour per session and 20 a day,
  and each turn's end is pushed too, so each daemon gives 10 samples (5 sessions, 2 turns
  each); the run starts 10 daemons (--quick: 2). A daemon's first push also imports
  pywebpush: it is reported apart (first_push_ms).

Figures are printed, never asserted (benchmarks/README.md has the measured ones).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import http_ece
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from betcode.devtools.fake_claude import make_fake_claude

# A turn is pushed twice (its request waits, its end), and 5 an hour per session, 20 a day
# for the daemon are counted: 2 turns in each of 5 sessions.
SESSIONS = 5
TURNS_PER_SESSION = 2
START_TIMEOUT_S = 30.0


class PushReceiver:
    """Takes every POST to /push/*, noting when it arrived; decrypts it (as the browser would,
    after the timing) to tell a waiting request's push from the others."""

    def __init__(self) -> None:
        self.arrivals: asyncio.Queue[tuple[float, dict[str, Any]]] = asyncio.Queue()
        self.private_key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/push/{id}", self._receive)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self.url

    async def _receive(self, request: web.Request) -> web.Response:
        arrived = time.time()
        body = await request.read()
        plain = http_ece.decrypt(
            body, private_key=self.private_key, auth_secret=self.auth, version="aes128gcm"
        )
        self.arrivals.put_nowait((arrived, json.loads(plain)))
        return web.Response(status=201)

    async def next_request(self) -> float:
        """When the next waiting request's push arrived (resolved ones are skipped)."""
        while True:
            arrived, payload = await asyncio.wait_for(self.arrivals.get(), 30)
            if payload["kind"] == "permission":
                return arrived

    def subscription(self) -> dict[str, Any]:
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        keys = {"p256dh": b64(point), "auth": b64(self.auth)}
        return {"endpoint": f"{self.url}/push/1", "keys": keys}


def start_daemon(root: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    (root / "repo").mkdir(parents=True)
    permission = {"do": "permission", "tool_name": "Bash", "input": {"command": "true"}}
    fake = make_fake_claude(
        root / "fake", {"turns": [[{"do": "sleep", "seconds": 0.3}, permission]]}
    )
    env = {
        **os.environ,
        "BETCODE_CLAUDE_BIN": str(fake),
        "BETCODE_SOCKET": str(root / "sock" / "daemon.sock"),
        "BETCODE_DATA_DIR": str(root / "data"),
        "BETCODE_CONFIG_DIR": str(root / "config"),
    }
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "betcode.cli.main", "daemon", "start", "--foreground"]
    with open(root / "daemon.log", "wb") as log:
        process = subprocess.Popen(
            [*command, "--no-import", "--http", f"127.0.0.1:{port}",
             "--set", "web.push.allow_loopback_endpoints=true"],
            env=env, stdout=log, stderr=log,
        )  # fmt: skip
    address = root / "data" / "web-address"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not address.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not start; see {root / 'daemon.log'}")
        time.sleep(0.05)
    token = (root / "config" / "web-token").read_text().strip()
    return process, address.read_text().strip(), token


async def one_turn(
    http: aiohttp.ClientSession, base: str, session_id: str, after: int, receiver: PushReceiver
) -> tuple[float, int]:
    """The message sent and the page gone; the push awaited; the request's event read and
    answered. The delay in ms, and the session's last sequence."""
    url = f"{base}/api/sessions/{session_id}/stream?from={after}&client=web-bench"
    async with http.ws_connect(url, max_msg_size=0) as ws:
        await ws.send_str(json.dumps({"message": {"content": "go"}}))
    arrived = await receiver.next_request()
    events: list[dict[str, Any]] = []
    async with http.ws_connect(url, max_msg_size=0) as ws:
        async for message in ws:
            events.extend(json.loads(message.data))
            requests = [e for e in events if "permission_request" in e]
            if requests and not any("permission_resolved" in e for e in events):
                request = requests[0]  # the stored one (a replay at the live edge follows)
                request_id = request["permission_request"]["request_id"]
                async with http.post(
                    f"{base}/api/permissions/{request_id}", json={"decision": "allow_once"}
                ) as response:
                    assert response.status == 200, await response.text()
            if any("turn_complete" in e for e in events):
                break
    made = datetime.fromisoformat(request["timestamp"].replace("Z", "+00:00")).timestamp()
    last = max(int(e.get("sequence", 0)) for e in events)
    return (arrived - made) * 1000, last


async def one_daemon(root: Path) -> list[float]:
    receiver = PushReceiver()
    await receiver.start()
    process, base, token = start_daemon(root)
    delays: list[float] = []
    try:
        headers = {"Authorization": f"Bearer {token}", "X-BetCode-Client": "web-bench"}
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.post(
                f"{base}/api/push/subscriptions", json=receiver.subscription()
            ) as response:
                assert response.status == 201, await response.text()
            for _ in range(SESSIONS):
                async with http.post(
                    f"{base}/api/sessions", json={"working_directory": str(root / "repo")}
                ) as response:
                    session_id = str((await response.json())["session_id"])
                after = 0
                for _ in range(TURNS_PER_SESSION):
                    delay, after = await one_turn(http, base, session_id, after, receiver)
                    delays.append(delay)
    finally:
        process.terminate()
        process.wait(20)
        await receiver.runner.cleanup()
    return delays


async def run(daemons: int) -> dict[str, Any]:
    firsts: list[float] = []
    delays: list[float] = []
    for n in range(daemons):
        with tempfile.TemporaryDirectory(prefix="betcode-bench-push-") as scratch:
            first, *rest = await one_daemon(Path(scratch) / f"d{n}")
            firsts.append(first)
            delays += rest
    ordered = sorted(delays)
    return {
        "request_to_push_samples": len(delays),
        "request_to_push_ms_p50": round(statistics.median(ordered), 2),
        "request_to_push_ms_p99": round(ordered[math.ceil(len(ordered) * 0.99) - 1], 2),
        "request_to_push_ms_max": round(ordered[-1], 2),
        # A daemon's first push also imports pywebpush (and requests): kept apart.
        "first_push_ms": [round(first, 1) for first in firsts],
        "machine": f"{platform.python_version()} on {os.cpu_count()} CPUs",
        "load_average": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 daemons, not 10")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    figures = asyncio.run(run(2 if options.quick else 10))
    if options.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
