"""What the relay path costs: latency added to a paced event stream, and events per second,
locally vs through one relay instance vs through two (client on B, daemon's tunnel on A).

    .venv/bin/python benchmarks/bench_relay.py [--quick] [--json]

Processes: two relay processes (`betcode relay start`, sharing one relay dir and one NATS
server started here), a "machine" process (a stand-in daemon serving
``/betcode.v1.AgentService/ResumeSession`` on a Unix socket + the real tunnel client,
`betcode.tunnel.client.TunnelClient`, with its end-to-end identity), and this process as the
client (the CLI's own `EncryptingChannel`: every message sealed and opened, as `betcode
--relay` does). The stand-in daemon stamps each message with CLOCK_MONOTONIC when it sends it;
the client takes latency at arrival (one clock: one machine). The stand-in keeps the figure
about the relay path (tunnel, relay, NATS, encryption), not about claude or SQLite.

* latency: 100 events/s for N events; p50/p99 of send→arrival, local socket vs relay paths;
* throughput: N events as fast as the stand-in can send them, per path.

Relay paths: `relay_one_instance_plain` without end-to-end encryption (the stand-in daemon
allows it, as `daemon.relay.allow_unencrypted` does), then `relay_one_instance` and
`relay_two_instances` sealed (scheme v2, docs/RELAY.md): the difference is what the
encryption costs, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from betcode.cli.relay_e2e import EncryptingChannel
from betcode.relay.layout import RelayFiles, init_relay
from betcode.relay.nats_server import NatsServer
from betcode.remote.e2e import ClientHandshake, ClientSession, DaemonIdentity
from betcode.tunnel.client import Backoff, TunnelClient, TunnelSettings
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import (
    agent_pb2_grpc,
    auth_pb2,
    auth_pb2_grpc,
    machine_pb2,
    machine_pb2_grpc,
    tunnel_pb2,
)

METHOD = "/betcode.v1.AgentService/ResumeSession"
PAYLOAD = b"x" * 120  # about a TextDelta event
SCRIPT = str(Path(__file__).resolve())
LISTENING = re.compile(r"listening on (\S+) \(daemons: (\S+)\)")
MACHINE = "bench"
# The relay without end-to-end encryption (the daemon allowing it), then with it (scheme v2:
# per-call counters, forward-secret session), through one instance and through two.
PATHS = ("local", "relay_one_instance_plain", "relay_one_instance", "relay_two_instances")


def _identity(data: bytes) -> bytes:
    return data


# --- the machine side (its own process) ------------------------------------------------------


async def machine_side(socket: str, certs: str, tunnel_url: str) -> None:
    async def resume(request: bytes, _context: grpc.aio.ServicerContext) -> Any:
        count, rate = struct.unpack(">Id", request[:12])
        interval = 1.0 / rate if rate else 0.0
        start = time.monotonic()
        for index in range(count):
            if interval:
                delay = start + index * interval - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            yield struct.pack(">q", time.monotonic_ns()) + PAYLOAD

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "betcode.v1.AgentService",
                {
                    "ResumeSession": grpc.unary_stream_rpc_method_handler(
                        resume, _identity, _identity
                    )
                },
            ),
        )
    )
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    identity = MachineIdentity(Path(certs))
    tunnel = TunnelClient(
        TunnelSettings(
            relay_urls=[tunnel_url],
            identity=identity,
            local_target=f"unix:{socket}",
            backoff=Backoff(initial=0.2, maximum=1.0),
            e2e=DaemonIdentity.load_or_create(identity.e2e_key_file),
            allow_unencrypted=True,  # for the plain path, the figure without encryption
        )
    )
    print("machine ready", flush=True)
    await tunnel.run()


# --- the client side -------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def stream(
    channel: Any, metadata: tuple[tuple[str, str], ...], count: int, rate: float
) -> tuple[list[float], float]:
    """Latencies (ms) of `count` events at `rate`/s (0 = as fast as possible), and events/s."""
    call = channel.unary_stream(
        METHOD, request_serializer=_identity, response_deserializer=_identity
    )(struct.pack(">Id", count, rate), metadata=metadata)
    latencies: list[float] = []
    started = time.monotonic()
    async for message in call:
        sent = struct.unpack(">q", message[:8])[0]
        latencies.append((time.monotonic_ns() - sent) / 1e6)
    elapsed = time.monotonic() - started
    return latencies, len(latencies) / elapsed


def start_relay(files: RelayFiles, nats_url: str, relay_id: str, log: Path) -> tuple[Any, str, str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "betcode.cli.main",
            "relay",
            "start",
            "--dir",
            str(files.root),
            "--listen",
            "127.0.0.1:0",
            "--tunnel-listen",
            "127.0.0.1:0",
            "--nats",
            nats_url,
            "--relay-id",
            relay_id,
        ],
        stdout=subprocess.PIPE,
        stderr=open(log, "ab"),  # noqa: SIM115 - closed with the process
        start_new_session=True,
    )
    assert process.stdout is not None
    match = LISTENING.search(process.stdout.readline().decode())
    if match is None:
        raise RuntimeError(f"relay {relay_id} did not start; see {log}")
    return process, match.group(1), match.group(2)


async def register(files: RelayFiles, client_url: str, certs: Path) -> str:
    creds = grpc.ssl_channel_credentials(root_certificates=files.ca_cert.read_bytes())
    async with grpc.aio.secure_channel(client_url, creds) as channel:
        reply = await auth_pb2_grpc.AuthServiceStub(channel).Register(
            auth_pb2.RegisterRequest(username="bench", password="bench-password")
        )
        identity = MachineIdentity(certs)
        request = machine_pb2.RegisterMachineRequest(
            machine_id=MACHINE, metadata={"csr_pem": identity.new_request(MACHINE).decode()}
        )
        machine = await machine_pb2_grpc.MachineServiceStub(channel).RegisterMachine(
            request, metadata=(("authorization", f"Bearer {reply.access_token}"),)
        )
        identity.store(
            MACHINE,
            MACHINE,
            machine.machine.metadata["certificate_pem"],
            machine.machine.metadata["ca_pem"],
        )
        return str(reply.access_token)


async def measure(quick: bool) -> dict[str, Any]:
    latency_events = 300 if quick else 1000
    flood_events = 3000 if quick else 20000
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="betcode-bench-relay-") as scratch:
        root = Path(scratch)
        files = RelayFiles(root / "relay")
        init_relay(files, ["127.0.0.1"])
        nats_server = NatsServer(root / "nats")
        await nats_server.start()
        relays = [start_relay(files, nats_server.url, name, root / f"{name}.log") for name in "AB"]
        machine = None
        try:
            (_, client_a, tunnel_a), (_, client_b, _tunnel_b) = relays
            certs = root / "certs"
            token = await register(files, client_a, certs)
            socket = str(root / "daemon.sock")
            machine = subprocess.Popen(  # noqa: ASYNC220 - started once, before measuring
                [sys.executable, SCRIPT, "--machine-side", socket, str(certs), tunnel_a],
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            assert machine.stdout is not None
            machine.stdout.readline()
            identity = DaemonIdentity.load_or_create(MachineIdentity(certs).e2e_key_file)
            paths: dict[str, tuple[Any, tuple[tuple[str, str], ...]]] = {}
            local = grpc.aio.insecure_channel(f"unix:{socket}")
            paths["local"] = (local, ())
            creds = grpc.ssl_channel_credentials(root_certificates=files.ca_cert.read_bytes())
            relayed: tuple[tuple[str, str], ...] = (
                ("authorization", f"Bearer {token}"),
                ("x-machine-id", MACHINE),
            )
            paths["relay_one_instance_plain"] = (grpc.aio.secure_channel(client_a, creds), relayed)
            for name, url in (("relay_one_instance", client_a), ("relay_two_instances", client_b)):
                raw = grpc.aio.secure_channel(url, creds)
                await wait_until_routed((raw, relayed))
                session = await handshake(raw, relayed, identity.public)
                paths[name] = (EncryptingChannel(raw, session), relayed)
            for name, (channel, metadata) in paths.items():
                latencies, _rate = await stream(channel, metadata, latency_events, 100.0)
                _latencies, rate = await stream(channel, metadata, flood_events, 0.0)
                results[name] = {
                    "latency_p50_ms": round(statistics.median(latencies), 3),
                    "latency_p99_ms": round(percentile(latencies, 0.99), 3),
                    "events_per_s": round(rate),
                }
            for channel, _metadata in paths.values():
                await channel.close()
        finally:
            if machine is not None:
                machine.kill()
                machine.wait()
            for process, _client, _tunnel in relays:
                process.terminate()
                process.wait(20)
            await nats_server.stop()
    results["seal_and_open_us_per_event"] = sealing_cost(flood_events)
    results["latency_events"] = latency_events
    results["flood_events"] = flood_events
    return results


def sealing_cost(count: int) -> float:
    """Microseconds to seal one event on the daemon's side and open it on the client's (scheme
    v2, one call's cipher pair), on this CPU alone: the encryption's own share of the figures
    above, which the shared machine's noise can hide."""
    daemon = DaemonIdentity(X25519PrivateKey.generate())
    pending = ClientHandshake()
    answer = tunnel_pb2.KeyExchangeResponse.FromString(
        daemon.exchange(pending.request(MACHINE).SerializeToString())
    )
    session = pending.complete(bytes(answer.daemon_ephemeral_pubkey), daemon.public)
    header, client = session.next_call(METHOD)
    daemon_side = daemon.open_call(header, METHOD)
    event = struct.pack(">q", 0) + PAYLOAD
    started = time.perf_counter()
    for _ in range(count):
        client.open(daemon_side.seal(event))
    return round((time.perf_counter() - started) / count * 1e6, 2)


async def handshake(
    channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...], daemon_identity: bytes
) -> ClientSession:
    """A forward-secret end-to-end session, as the CLI makes one (ExchangeKeys)."""
    pending = ClientHandshake()
    response = await agent_pb2_grpc.AgentServiceStub(channel).ExchangeKeys(
        pending.request(MACHINE), metadata=metadata
    )
    assert bytes(response.daemon_identity_pubkey) == daemon_identity
    return pending.complete(bytes(response.daemon_ephemeral_pubkey), daemon_identity)


async def wait_until_routed(path: tuple[Any, tuple[tuple[str, str], ...]]) -> None:
    channel, metadata = path
    deadline = time.monotonic() + 30
    while True:
        try:
            await stream(channel, metadata, 1, 0.0)
            return
        except grpc.aio.AioRpcError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--machine-side", nargs=3, metavar=("SOCKET", "CERTS", "TUNNEL_URL"))
    args = parser.parse_args()
    if args.machine_side:
        asyncio.run(machine_side(*args.machine_side))
        return
    results = asyncio.run(measure(args.quick))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"seal + open per event (CPU only): {results['seal_and_open_us_per_event']} µs")
    for name in PATHS:
        figures = results[name]
        print(
            f"{name:<26} p50 {figures['latency_p50_ms']:>7.2f} ms  "
            f"p99 {figures['latency_p99_ms']:>7.2f} ms  {figures['events_per_s']:>7} events/s"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
