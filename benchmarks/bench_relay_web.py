"""A waiting approval as a phone sees it: on the LAN (the daemon's web client) and through the
relay's web front (the page's path: a WebSocket per call, end-to-end sealed), side by side.

    .venv/bin/python benchmarks/bench_relay_web.py [--quick] [--json]

One relay in this process (its own nats-server), one daemon in this process on its tunnel, with
its web client on loopback, running the pinned real CLI against the mock model; one Bash call
waits for approval. Then, as the pages do it (aiohttp here, the browser's protocol):

* lan_list_waiting_ms: `GET /api/permissions` with a device credential (the LAN page's poll);
* relay_list_waiting_ms: `ListPendingPermissions` sealed with the browser's scheme (the Python
  implementation, which web-client/src/e2e.ts matches byte for byte), carried by the front's
  WebSocket, the relay's gRPC routing, NATS and the tunnel to the daemon and back, opened;
* relay_open_machine_ms: opening the machine: `ExchangeKeys` and the first sealed list.

p50 / p99 over N calls each (--quick: fewer), one after another. Figures are printed, never
asserted (benchmarks/README.md has the measured ones).
"""

from __future__ import annotations

import json
import ssl
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.relay import MACHINE, Rig, relay_rig, waiting_permission
from harness.web import WebClient, sign_in
from latency_report import percentiles, run_and_print

from betcode.config.settings import DaemonSettings, HttpSettings
from betcode.remote import e2e
from betcode.v1 import agent_pb2, tunnel_pb2
from betcode.web.token import read_or_create_token

LIST = "betcode.v1.AgentService/ListPendingPermissions"
EXCHANGE = "betcode.v1.AgentService/ExchangeKeys"


async def relay_call(
    http: aiohttp.ClientSession, url: str, token: str, method: str, message: bytes, header: str
) -> bytes:
    async with http.ws_connect(url, protocols=("betcode",)) as socket:
        await socket.send_str(json.dumps({"method": method, "e2e": header, "token": token}))
        await socket.send_bytes(message)
        await socket.send_str("end")
        answers = []
        async for frame in socket:
            if frame.type is aiohttp.WSMsgType.BINARY:
                answers.append(frame.data)
            else:
                status = json.loads(frame.data)
                assert status["code"] == "OK", status
                return bytes(answers[0])
    raise RuntimeError("the call ended without a status")


async def measure(rig: Rig, repo: Path, calls: int) -> dict[str, Any]:
    rig.config = replace(rig.config, settings=DaemonSettings(http=HttpSettings("127.0.0.1:0")))
    await rig.start_daemon()
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    start = agent_pb2.StartConversation(working_directory=str(repo))
    await waiting_permission(rig, start)

    lan_url = rig.daemon.web.url or ""
    device = await sign_in(lan_url, read_or_create_token(rig.config.config_dir))
    lan = WebClient(lan_url, device["credential"], "web-bench")
    lan_ms = []
    for _ in range(calls):
        began = time.perf_counter()
        status, body = await lan.call("GET", "/api/permissions")
        lan_ms.append((time.perf_counter() - began) * 1000)
        assert status == 200, body
        assert len(body["waiting"]) == 1, body
    await lan.close()

    front = f"https://127.0.0.1:{rig.relay.port}"
    trusted = ssl.create_default_context(cafile=str(rig.relay.options.files.ca_cert))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as http:
        body = {"username": "alice", "password": "pw-123456"}
        async with http.post(f"{front}/relay/api/login", json=body) as response:
            token = (await response.json())["access_token"]
        url = f"{front}/relay/api/machines/{MACHINE}/call"
        open_ms = []
        relay_ms = []
        for round_ in range(max(3, calls // 20)):
            began = time.perf_counter()
            handshake = e2e.ClientHandshake()
            request = handshake.request(MACHINE).SerializeToString()
            answer = tunnel_pb2.KeyExchangeResponse.FromString(
                await relay_call(http, url, token, EXCHANGE, request, "")
            )
            session = handshake.complete(
                answer.daemon_ephemeral_pubkey, answer.daemon_identity_pubkey
            )
            for index in range(calls if round_ == 0 else 1):
                call_began = time.perf_counter()
                header, cipher = session.next_call(LIST)
                sealed = await relay_call(http, url, token, LIST, cipher.seal(b""), header)
                listed = agent_pb2.ListPendingPermissionsResponse.FromString(cipher.open(sealed))
                assert len(listed.pending) == 1
                now = time.perf_counter()
                if index == 0:
                    open_ms.append((now - began) * 1000)
                else:
                    relay_ms.append((now - call_began) * 1000)
    return {
        "lan_list_waiting_ms": percentiles(lan_ms),
        "relay_list_waiting_ms": percentiles(relay_ms),
        "relay_open_machine_ms": percentiles(open_ms),
    }


async def main(quick: bool) -> dict[str, Any]:
    calls = 40 if quick else 300
    with tempfile.TemporaryDirectory(prefix="betcode-bench-relay-web-") as folder:
        async with relay_rig(Path(folder)) as (rig, workspace):
            return await measure(rig, workspace.repo, calls)


if __name__ == "__main__":
    run_and_print(__doc__.splitlines()[0], main)
