"""How long pairing a phone through the relay takes, step by step (docs/RELAY.md "Pairing a
phone through the relay").

    .venv/bin/python benchmarks/bench_relay_pairing.py [--quick] [--json]

One relay in this process (its own nats-server), one daemon in this process on its tunnel with
its LAN web listener on loopback (where `betcode web pair` gets the daemon's code; not timed),
the pinned real CLI against the mock model. Each pairing, as `web pair` and the phone make it:

* ticket_ms: the machine asks its relay for a ticket (`CreatePairingTicket`, with its
  certificate and a fresh ECDSA proof; a new TLS connection, as `web pair` opens one);
* relay_login_ms: the phone's `POST /relay/api/pair` at the relay's address (HTTPS, one
  connection kept, as a browser keeps one);
* key_exchange_ms: `ExchangeKeys` through the relay with the device login's token (an online
  session, as the page makes);
* daemon_code_ms: `POST /api/devices/pair`, sealed, as a `WebGatewayService.Fetch` through the
  relay (the gRPC path, without the front's WebSocket per call a browser adds);
* phone_total_ms: the phone's three steps together.

p50 / p99 over N pairings (--quick: fewer). Figures are printed, never asserted.
"""

from __future__ import annotations

import ssl
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import grpc.aio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.relay import MACHINE, Rig, bearer, relay_rig
from harness.web import WebClient
from harness.web_gateway import GatewayClient
from latency_report import percentiles, run_and_print

from betcode.cli.relay_e2e import EncryptingChannel
from betcode.config.settings import DaemonSettings, HttpSettings
from betcode.remote import e2e
from betcode.remote.machine_proof import proof_metadata
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import agent_pb2_grpc, machine_pb2, machine_pb2_grpc, tunnel_pb2
from betcode.web.token import read_or_create_token

STEPS = ("ticket_ms", "relay_login_ms", "key_exchange_ms", "daemon_code_ms", "phone_total_ms")


async def new_ticket(rig: Rig) -> str:
    identity = MachineIdentity(rig.config.config_dir / "certs")
    root = rig.relay.options.files.ca_cert.read_bytes()
    credentials = grpc.ssl_channel_credentials(root_certificates=root)
    async with grpc.aio.secure_channel(f"127.0.0.1:{rig.relay.port}", credentials) as channel:
        reply = await machine_pb2_grpc.MachineServiceStub(channel).CreatePairingTicket(
            machine_pb2.CreatePairingTicketRequest(),
            metadata=proof_metadata(identity.private_key(), identity.certificate()),
        )
    return str(reply.ticket)


async def daemon_code(owner: WebClient) -> str:
    status, made = await owner.call("POST", "/api/pairing-codes")
    assert status == 201, made
    return str(made["code"])


async def one_pairing(rig: Rig, http: aiohttp.ClientSession, owner: WebClient) -> dict[str, float]:
    code = await daemon_code(owner)
    began = time.perf_counter()
    ticket = await new_ticket(rig)
    ticketed = time.perf_counter()
    url = f"https://127.0.0.1:{rig.relay.port}/relay/api/pair"
    async with http.post(url, json={"ticket": ticket, "name": "bench phone"}) as response:
        login = await response.json()
        assert response.status == 200, login
    logged_in = time.perf_counter()
    metadata = (*bearer(login["access_token"]), ("x-machine-id", MACHINE))
    handshake = e2e.ClientHandshake()
    exchanged: tunnel_pb2.KeyExchangeResponse = await agent_pb2_grpc.AgentServiceStub(
        rig.channel
    ).ExchangeKeys(handshake.request(MACHINE), metadata=metadata)
    session = handshake.complete(
        exchanged.daemon_ephemeral_pubkey, exchanged.daemon_identity_pubkey
    )
    keyed = time.perf_counter()
    phone = GatewayClient(EncryptingChannel(rig.channel, session), "", "web-bench", metadata)
    status, device = await phone.call("POST", "/api/devices/pair", {"code": code})
    assert status == 201, device
    paired = time.perf_counter()
    return {
        "ticket_ms": (ticketed - began) * 1000,
        "relay_login_ms": (logged_in - ticketed) * 1000,
        "key_exchange_ms": (keyed - logged_in) * 1000,
        "daemon_code_ms": (paired - keyed) * 1000,
        "phone_total_ms": (paired - ticketed) * 1000,
    }


async def measure(rig: Rig, pairings: int) -> dict[str, Any]:
    rig.config = replace(rig.config, settings=DaemonSettings(http=HttpSettings("127.0.0.1:0")))
    await rig.start_daemon()
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    owner = WebClient(rig.daemon.web.url or "", read_or_create_token(rig.config.config_dir))
    trusted = ssl.create_default_context(cafile=str(rig.relay.options.files.ca_cert))
    samples: dict[str, list[float]] = {step: [] for step in STEPS}
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as http:
            await one_pairing(rig, http, owner)  # warm: connections, the relay's routing
            for _ in range(pairings):
                for step, value in (await one_pairing(rig, http, owner)).items():
                    samples[step].append(value)
    finally:
        await owner.close()
    return {step: percentiles(samples[step]) for step in STEPS}


async def main(quick: bool) -> dict[str, Any]:
    pairings = 10 if quick else 60
    with tempfile.TemporaryDirectory(prefix="betcode-bench-pairing-") as folder:
        async with relay_rig(Path(folder)) as (rig, _workspace):
            return await measure(rig, pairings)


if __name__ == "__main__":
    run_and_print(__doc__.splitlines()[0], main)
