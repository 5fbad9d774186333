"""Web Push's figure: from a permission request waiting in the daemon to its push arriving at a
push service, sent directly by the daemon (a device on its LAN) and through the relay (a device
that reaches the machine through it), side by side. A daemon (`betcode daemon start
--foreground --http`, fake claude children, the loopback push setting on) in its own process;
for the relay path a relay too (`betcode relay start --push-allow-loopback`, its own
nats-server), the daemon registered with it and dialling it; a local stand-in RFC 8030 push
service here.

    .venv/bin/python benchmarks/bench_push.py [--quick] [--json]

* direct_request_to_push_ms, relay_request_to_push_ms (p50, p99, max): the fake claude asks
  for a Bash permission 0.3 s into each turn; the page sent the turn's message and left, so
  nobody holds the input lock and the request is pushed. From the PermissionRequest event's
  timestamp (made in the daemon when it read claude's request) to the push's POST reaching the
  push service: the request stored, the push notifier woken, the payload encrypted (aes128gcm)
  and VAPID-signed, then the POST; through the relay, the PushRelayService call on the tunnel's
  connection and the relay's POST. All clocks are this machine's. Each daemon gives 20 samples
  (5 sessions, 4 turns each: within the 20 requests an hour per session that are pushed); the
  run starts 5 daemons for each path (--quick: 2). The subscription is registered on the LAN
  for the direct path, through the web gateway for the relay path. A daemon's first push also
  imports pywebpush: it is reported apart (first_push_ms).

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
import grpc
import grpc.aio
import http_ece
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.relay import RelayProcess, register
from harness.relay import register_machine as relay_machine
from harness.web import sign_in

from betcode.devtools.fake_claude import make_fake_claude
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import web_gateway_pb2, web_gateway_pb2_grpc

# Requests are pushed at most 20 an hour per session and turn ends 20 a day for the daemon
# (counted apart): 4 turns in each of 5 sessions fit both.
SESSIONS = 5
TURNS_PER_SESSION = 4
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


def start_daemon(root: Path, relay_url: str | None) -> tuple[subprocess.Popen[bytes], str, str]:
    (root / "repo").mkdir(parents=True, exist_ok=True)
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
             "--set", "web.push.allow_loopback_endpoints=true",
             *(["--relay", relay_url] if relay_url else [])],
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


async def register_machine(relay: RelayProcess, root: Path, user: str) -> None:
    """A relay account for this daemon (the relay counts pushes per user) and the machine
    registered with it, as `machine register` leaves it in the daemon's config directory."""
    credentials = grpc.ssl_channel_credentials(root_certificates=relay.ca.read_bytes())
    async with grpc.aio.secure_channel(relay.url.split("://", 1)[1], credentials) as channel:
        account = await register(channel, user)
        identity = MachineIdentity(root / "config" / "certs")
        await relay_machine(channel, account, f"{user}-box", identity)


async def subscribe_through_gateway(
    root: Path, base: str, token: str, subscription: dict[str, Any]
) -> None:
    """As a device reaching the machine through the relay registers it: a device credential,
    the request carried by WebGatewayService (here on the daemon's own socket: the relay only
    forwards the sealed call)."""
    device = await sign_in(base, token, "bench phone")
    request = web_gateway_pb2.WebRequest(
        method="POST",
        path="/api/push/subscriptions",
        headers={
            "authorization": f"Bearer {device['credential']}",
            "content-type": "application/json",
            "x-betcode-client": "web-bench-phone",
        },
        body=json.dumps(subscription).encode(),
    )
    async with grpc.aio.insecure_channel(f"unix:{root / 'sock' / 'daemon.sock'}") as channel:
        answer = await web_gateway_pb2_grpc.WebGatewayServiceStub(channel).Fetch(request)
    assert answer.status == 201, answer.body


async def one_daemon(root: Path, relay: RelayProcess | None, user: str) -> list[float]:
    receiver = PushReceiver()
    await receiver.start()
    if relay is not None:
        await register_machine(relay, root, user)
    process, base, token = start_daemon(root, relay.tunnel_url if relay else None)
    delays: list[float] = []
    try:
        headers = {"Authorization": f"Bearer {token}", "X-BetCode-Client": "web-bench"}
        async with aiohttp.ClientSession(headers=headers) as http:
            if relay is None:
                async with http.post(
                    f"{base}/api/push/subscriptions", json=receiver.subscription()
                ) as response:
                    assert response.status == 201, await response.text()
            else:
                await subscribe_through_gateway(root, base, token, receiver.subscription())
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


def figures(path: str, firsts: list[float], delays: list[float]) -> dict[str, Any]:
    ordered = sorted(delays)
    return {
        f"{path}_request_to_push_samples": len(delays),
        f"{path}_request_to_push_ms_p50": round(statistics.median(ordered), 2),
        f"{path}_request_to_push_ms_p99": round(ordered[math.ceil(len(ordered) * 0.99) - 1], 2),
        f"{path}_request_to_push_ms_max": round(ordered[-1], 2),
        # A daemon's first push also imports pywebpush (and requests): kept apart.
        f"{path}_first_push_ms": [round(first, 1) for first in firsts],
    }


async def run(daemons: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="betcode-bench-push-") as scratch:
        relay = RelayProcess(
            Path(scratch) / "relay", extra_args=["--push-allow-loopback", "--registration", "open"]
        )
        relay.start()
        try:
            for path, through in (("direct", None), ("relay", relay)):
                firsts: list[float] = []
                delays: list[float] = []
                for n in range(daemons):
                    root = Path(scratch) / f"{path}-{n}"
                    first, *rest = await one_daemon(root, through, f"bench-{n}")
                    firsts.append(first)
                    delays += rest
                results.update(figures(path, firsts, delays))
        finally:
            relay.stop()
    results["machine"] = f"{platform.python_version()} on {os.cpu_count()} CPUs"
    results["load_average"] = round(os.getloadavg()[0], 1)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 daemons a path, not 5")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    measured = asyncio.run(run(2 if options.quick else 5))
    if options.json:
        print(json.dumps(measured, indent=2))
    else:
        for key, value in measured.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
