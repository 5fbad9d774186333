"""The relay's refusals, provoked for real against a relay in this event loop (its own
nats-server, SQLite): tokens (missing, garbage, forged, expired, wrong issuer, revoked,
replayed refresh), another user's machine, machine certificates (none, foreign CA, replaced,
expired) and garbage on the tunnel. Each refusal is checked to route nothing: a NATS
subscriber on every machine subject sees no message."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import jwt
import pytest
from harness.relay import (
    bearer,
    client_channel,
    register,
    register_machine,
    relay_in_process,
    tunnel_channel,
)

from betcode.relay.accounts import Accounts
from betcode.relay.auth_service import Registration
from betcode.relay.server import Relay
from betcode.relay.tokens import ALGORITHM, AUDIENCE, ISSUER
from betcode.remote.e2e import DaemonIdentity
from betcode.remote.machine_proof import proof_metadata
from betcode.remote.pki import (
    Authority,
    cert_pem,
    certificate_request,
    key_pem,
    new_key,
    serial_hex,
)
from betcode.tunnel.client import Backoff, TunnelClient, TunnelSettings
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    auth_pb2,
    auth_pb2_grpc,
    machine_pb2,
    machine_pb2_grpc,
    tunnel_pb2,
    tunnel_pb2_grpc,
)


@dataclass
class Setup:
    relay: Relay
    channel: grpc.aio.Channel
    routed: list[str]  # subjects of every message published on a machine subject
    spy: Any  # that subscription (a subscriber counts as the machine's responder)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    # Open registration: these tests need several users (invitations: test_relay_admission).
    async with relay_in_process(tmp_path / "relay", registration=Registration.OPEN) as relay:
        assert relay.nc is not None
        routed: list[str] = []

        async def record(msg: object) -> None:
            routed.append(getattr(msg, "subject", ""))

        spy = await relay.nc.subscribe("betcode.machine.>", cb=record)
        async with client_channel(relay) as channel:
            yield Setup(relay, channel, routed, spy)


async def code_of(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def token(secret: bytes, **changes: object) -> str:
    now = int(time.time())
    claims: dict[str, object] = {
        "sub": "someone",
        "email": "",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + 600,
        "jti": "family.x",
    }
    claims.update(changes)
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, secret, ALGORITHM)


async def test_bad_tokens_are_refused_and_nothing_is_routed(setup: Setup) -> None:
    alice = await register(setup.channel, "alice")
    await register_machine(setup.channel, alice, "box")
    secret = setup.relay.options.files.jwt_secret()
    logout = await auth_pb2_grpc.AuthServiceStub(setup.channel).RevokeToken(
        auth_pb2.RevokeTokenRequest(refresh_token=alice.refresh)
    )
    assert logout.revoked
    table = {
        "missing": (),
        "garbage": bearer("not-a-jwt"),
        "forged": bearer(token(b"another key" * 4, sub=alice.user_id)),
        "expired": bearer(token(secret, sub=alice.user_id, exp=int(time.time()) - 5)),
        "wrong issuer": bearer(token(secret, sub=alice.user_id, iss="someone-else")),
        "wrong audience": bearer(token(secret, sub=alice.user_id, aud="other")),
        "no jti": bearer(token(secret, sub=alice.user_id, jti=None)),
        "revoked (logged out)": bearer(alice.access),
    }
    agent = agent_pb2_grpc.AgentServiceStub(setup.channel)
    machines = machine_pb2_grpc.MachineServiceStub(setup.channel)
    refused = {}
    for case, metadata in table.items():
        routed_call = agent.ListSessions(
            agent_pb2.ListSessionsRequest(), metadata=(*metadata, ("x-machine-id", "box"))
        )
        listed = machines.ListMachines(machine_pb2.ListMachinesRequest(), metadata=metadata)
        refused[case] = (await code_of(routed_call), await code_of(listed))
    unauthenticated = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAUTHENTICATED)
    assert refused == dict.fromkeys(table, unauthenticated)
    assert setup.routed == []


async def test_refresh_rotates_and_a_replayed_refresh_token_ends_the_login(setup: Setup) -> None:
    alice = await register(setup.channel, "alice")
    auth = auth_pb2_grpc.AuthServiceStub(setup.channel)
    rotated = await auth.RefreshToken(auth_pb2.RefreshTokenRequest(refresh_token=alice.refresh))
    assert rotated.refresh_token != alice.refresh
    assert rotated.expires_in_secs == 900
    machines = machine_pb2_grpc.MachineServiceStub(setup.channel)
    listing = machine_pb2.ListMachinesRequest()
    assert await code_of(machines.ListMachines(listing, metadata=bearer(rotated.access_token))) == (
        grpc.StatusCode.OK
    )
    # The old refresh token again: someone copied it. Both it and the rotated login end.
    replay = auth.RefreshToken(auth_pb2.RefreshTokenRequest(refresh_token=alice.refresh))
    assert await code_of(replay) == grpc.StatusCode.UNAUTHENTICATED
    newest = auth.RefreshToken(auth_pb2.RefreshTokenRequest(refresh_token=rotated.refresh_token))
    assert await code_of(newest) == grpc.StatusCode.UNAUTHENTICATED
    stale = machines.ListMachines(listing, metadata=bearer(rotated.access_token))
    assert await code_of(stale) == grpc.StatusCode.UNAUTHENTICATED
    wrong = auth.Login(auth_pb2.LoginRequest(username="alice", password="wrong-password"))
    assert await code_of(wrong) == grpc.StatusCode.UNAUTHENTICATED


async def test_another_users_machine_is_out_of_reach(setup: Setup) -> None:
    alice = await register(setup.channel, "alice")
    bob = await register(setup.channel, "bob")
    await register_machine(setup.channel, alice, "alices-box")
    machines = machine_pb2_grpc.MachineServiceStub(setup.channel)
    agent = agent_pb2_grpc.AgentServiceStub(setup.channel)
    as_bob = bearer(bob.access)
    outcomes = {
        "get": await code_of(
            machines.GetMachine(
                machine_pb2.GetMachineRequest(machine_id="alices-box"), metadata=as_bob
            )
        ),
        "remove": await code_of(
            machines.RemoveMachine(
                machine_pb2.RemoveMachineRequest(machine_id="alices-box"), metadata=as_bob
            )
        ),
        "route": await code_of(
            agent.ListSessions(
                agent_pb2.ListSessionsRequest(),
                metadata=(*as_bob, ("x-machine-id", "alices-box")),
            )
        ),
    }
    assert outcomes == dict.fromkeys(outcomes, grpc.StatusCode.NOT_FOUND)
    with pytest.raises(grpc.aio.AioRpcError) as taken:
        await register_machine(setup.channel, bob, "alices-box")
    assert taken.value.code() == grpc.StatusCode.ALREADY_EXISTS
    listed = await machines.ListMachines(machine_pb2.ListMachinesRequest(), metadata=as_bob)
    assert list(listed.machines) == []
    assert setup.routed == []
    # Alice's own machine, offline: refused at once (no relay holds its tunnel).
    await setup.spy.unsubscribe()
    with pytest.raises(grpc.aio.AioRpcError) as offline:
        await agent.ListSessions(
            agent_pb2.ListSessionsRequest(),
            metadata=(*bearer(alice.access), ("x-machine-id", "alices-box")),
        )
    assert offline.value.code() == grpc.StatusCode.UNAVAILABLE
    assert offline.value.details() == "machine alices-box is offline"


async def tunnel_outcome(relay: Relay, key: bytes | None, cert: bytes | None) -> str:
    async with tunnel_channel(relay, key, cert) as channel:
        stub = tunnel_pb2_grpc.TunnelServiceStub(channel)
        try:
            await stub.Register(tunnel_pb2.TunnelRegisterRequest(), timeout=10)
        except grpc.aio.AioRpcError as error:
            name: str = error.code().name
            return name
    return "OK"


async def test_machine_certificates_that_are_refused(setup: Setup, tmp_path: Path) -> None:
    alice = await register(setup.channel, "alice")
    first = await register_machine(setup.channel, alice, "box")
    authority = setup.relay.options.files.authority()
    foreign = Authority.create()
    stranger_key = new_key()
    expired_key = new_key()
    expired = authority.machine_certificate(
        certificate_request(expired_key, "box"), "box", lifetime=-datetime.timedelta(seconds=1)
    )
    assert await tunnel_outcome(setup.relay, first.key, first.cert) == "OK"
    second = await register_machine(setup.channel, alice, "box")  # replaces (revokes) the first
    table = {
        "none": await tunnel_outcome(setup.relay, None, None),
        "foreign CA": await tunnel_outcome(
            setup.relay,
            key_pem(stranger_key),
            cert_pem(foreign.machine_certificate(certificate_request(stranger_key, "box"), "box")),
        ),
        "replaced": await tunnel_outcome(setup.relay, first.key, first.cert),
        "expired": await tunnel_outcome(setup.relay, key_pem(expired_key), cert_pem(expired)),
    }
    # No certificate or a foreign one: the TLS handshake itself fails (UNAVAILABLE).
    assert table == {
        "none": "UNAVAILABLE",
        "foreign CA": "UNAVAILABLE",
        "replaced": "UNAUTHENTICATED",
        "expired": "UNAVAILABLE",
    }
    assert await tunnel_outcome(setup.relay, second.key, second.cert) == "OK"


async def test_garbage_and_oversized_frames_end_the_tunnel_and_route_nothing(
    setup: Setup,
) -> None:
    alice = await register(setup.channel, "alice")
    machine = await register_machine(setup.channel, alice, "box")
    async with tunnel_channel(setup.relay, machine.key, machine.cert) as channel:
        raw = channel.stream_stream("/betcode.v1.TunnelService/OpenTunnel")
        garbage = raw(iter([b"\xff\xff\xff garbage"]))
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            async for _frame in garbage:
                pass
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "undecodable frame" in (bad.value.details() or "")
        oversized = raw(iter([b"\x0a" + b"\x00" * (17 * 1024 * 1024)]))
        with pytest.raises(grpc.aio.AioRpcError) as big:
            async for _frame in oversized:
                pass
        assert big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await asyncio.sleep(0.1)
    assert setup.routed == []


async def test_a_certificate_near_its_end_is_renewed_over_the_tunnel(
    setup: Setup, tmp_path: Path
) -> None:
    alice = await register(setup.channel, "alice")
    identity = MachineIdentity(tmp_path / "certs")
    await register_machine(setup.channel, alice, "box", identity)
    # Make the stored certificate one that ends in 10 days (< the 30-day renewal margin).
    authority = setup.relay.options.files.authority()
    short = authority.machine_certificate(
        certificate_request(identity.private_key(), "box"),
        "box",
        lifetime=datetime.timedelta(days=10),
    )
    identity.cert_file.write_bytes(cert_pem(short))
    assert setup.relay.database is not None
    await Accounts(setup.relay.database).set_cert_serial("box", serial_hex(short))
    old_key, old_cert = identity.key_file.read_bytes(), identity.cert_file.read_bytes()
    tunnel = TunnelClient(
        TunnelSettings(
            relay_urls=[f"https://127.0.0.1:{setup.relay.tunnel_port}"],
            identity=identity,
            local_target=f"unix:{tmp_path / 'no-daemon.sock'}",
            backoff=Backoff(initial=0.1, maximum=0.5),
        )
    )
    task = asyncio.create_task(tunnel.run())
    try:
        async with asyncio.timeout(30):
            while identity.cert_file.read_bytes() == old_cert:  # noqa: ASYNC110 - a file
                await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert not identity.expires_within(datetime.timedelta(days=300))
    assert identity.key_file.read_bytes() != old_key  # a new key, made on the machine
    new_key_, new_cert = identity.key_file.read_bytes(), identity.cert_file.read_bytes()
    assert await tunnel_outcome(setup.relay, new_key_, new_cert) == "OK"
    assert await tunnel_outcome(setup.relay, old_key, old_cert) == "UNAUTHENTICATED"


async def test_login_attempts_are_limited_per_address(setup: Setup) -> None:
    await register(setup.channel, "alice")  # the first of this address's 10 a minute
    auth = auth_pb2_grpc.AuthServiceStub(setup.channel)
    wrong = auth_pb2.LoginRequest(username="alice", password="not-the-password")
    outcomes = [await code_of(auth.Login(wrong)) for _ in range(9)]
    assert outcomes == [grpc.StatusCode.UNAUTHENTICATED] * 9
    right = auth_pb2.LoginRequest(username="alice", password="pw-123456")
    with pytest.raises(grpc.aio.AioRpcError) as limited:
        await auth.Login(right)
    assert limited.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert int(dict(limited.value.trailing_metadata() or ())["retry-after-ms"]) > 0


async def proof_outcome(setup: Setup, metadata: tuple[tuple[str, str], ...]) -> str:
    """TunnelService.Register on the clients' port (TLS without client certificates), with
    the machine's proof in its metadata."""
    stub = tunnel_pb2_grpc.TunnelServiceStub(setup.channel)
    try:
        await stub.Register(tunnel_pb2.TunnelRegisterRequest(), metadata=metadata, timeout=10)
    except grpc.aio.AioRpcError as error:
        name: str = error.code().name
        return name
    return "OK"


async def test_one_address_machine_proofs_on_the_clients_port(setup: Setup, tmp_path: Path) -> None:
    """A daemon may dial the clients' port (one address for both): it proves its certificate
    in metadata. What is refused there, and a real tunnel through it."""
    alice = await register(setup.channel, "alice")
    identity = MachineIdentity(tmp_path / "certs")
    await register_machine(setup.channel, alice, "box", identity)
    key, cert = identity.private_key(), identity.certificate()
    authority = setup.relay.options.files.authority()
    foreign = Authority.create()
    stranger = new_key()
    expired_key = new_key()
    expired = authority.machine_certificate(
        certificate_request(expired_key, "box"), "box", lifetime=-datetime.timedelta(seconds=1)
    )
    genuine = proof_metadata(key, cert)
    table = {
        "genuine": await proof_outcome(setup, genuine),
        "none": await proof_outcome(setup, ()),
        "another key's signature": await proof_outcome(
            setup, (genuine[0], proof_metadata(stranger, cert)[1])
        ),
        "stale": await proof_outcome(setup, proof_metadata(key, cert, now=time.time() - 600)),
        "foreign CA": await proof_outcome(
            setup,
            proof_metadata(
                stranger,
                foreign.machine_certificate(certificate_request(stranger, "box"), "box"),
            ),
        ),
        "expired": await proof_outcome(setup, proof_metadata(expired_key, expired)),
        "garbage": await proof_outcome(
            setup, (("x-betcode-machine-cert", "%%%"), ("x-betcode-machine-proof", "1.x"))
        ),
    }
    assert table == {
        "genuine": "OK",
        **{name: "UNAUTHENTICATED" for name in table if name != "genuine"},
    }
    # Replaced: the old certificate's proof is refused once the machine registered again.
    await register_machine(setup.channel, alice, "box", identity)
    assert await proof_outcome(setup, genuine) == "UNAUTHENTICATED"

    # A real daemon tunnel on the clients' port: ExchangeKeys is answered through it.
    tunnel = TunnelClient(
        TunnelSettings(
            relay_urls=[f"https://127.0.0.1:{setup.relay.port}"],
            identity=identity,
            local_target=f"unix:{tmp_path / 'no-daemon.sock'}",
            backoff=Backoff(initial=0.1, maximum=0.5),
            e2e=DaemonIdentity.load_or_create(identity.e2e_key_file),
        )
    )
    task = asyncio.create_task(tunnel.run())
    try:
        await asyncio.wait_for(tunnel.connected.wait(), 30)
        answer = await agent_pb2_grpc.AgentServiceStub(setup.channel).ExchangeKeys(
            tunnel_pb2.KeyExchangeRequest(machine_id="box"),
            metadata=(*bearer(alice.access), ("x-machine-id", "box")),
            timeout=30,
        )
        assert len(answer.daemon_ephemeral_pubkey) == 32
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
