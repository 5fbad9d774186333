"""Pairing a phone through the relay with a real relay (its own nats-server), a real daemon on
the tunnel and `betcode web pair`: the machine's ticket (asked as the machine) exchanged at the
relay's web front for a device login that reaches that machine only; one use, expiry, the
guessing limit; the device listed, and its revocation ending its access and refresh tokens at
once."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from harness.pairing import relay_pairing, remember_relay, web_command, web_pair
from harness.relay import (
    MACHINE,
    Rig,
    bearer,
    client_channel,
    register,
    register_machine,
    relay_in_process,
    rig_fixture,
    until_reachable,
)
from harness.servers import postgres
from harness.web_gateway import GatewayClient

from betcode.cli.web_cmd import RELAY_LOOPBACK_HINT
from betcode.config.settings import DaemonSettings, HttpSettings
from betcode.daemon import Daemon
from betcode.relay.buffer import BufferSettings
from betcode.relay.pairing import MAX_WRONG_PER_ADDRESS
from betcode.relay.web import device_name
from betcode.remote import e2e
from betcode.remote.machine_proof import proof_metadata
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    auth_pb2,
    auth_pb2_grpc,
    machine_pb2,
    machine_pb2_grpc,
    web_access_pb2,
    web_access_pb2_grpc,
)

rig = pytest.fixture(rig_fixture(BufferSettings()))
PHONE_AGENT = (
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0 Mobile Safari/537.36"
)


def front_url(rig: Rig) -> str:
    """Where browsers reach the relay: its one client address."""
    return f"https://127.0.0.1:{rig.relay.port}"


def machine_identity(rig: Rig) -> MachineIdentity:
    return MachineIdentity(rig.config.config_dir / "certs")


@pytest.fixture
async def http(rig: Rig) -> AsyncIterator[aiohttp.ClientSession]:
    trusted = ssl.create_default_context(cafile=str(rig.relay.options.files.ca_cert))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as session:
        yield session


async def new_ticket(rig: Rig) -> str:
    """A pairing ticket, asked for as the machine (its certificate and proof)."""
    identity = machine_identity(rig)
    reply = await machine_pb2_grpc.MachineServiceStub(rig.channel).CreatePairingTicket(
        machine_pb2.CreatePairingTicketRequest(),
        metadata=proof_metadata(identity.private_key(), identity.certificate()),
    )
    assert (reply.machine_id, reply.expires_in_secs) == (MACHINE, 300)
    return str(reply.ticket)


async def pair(
    http: aiohttp.ClientSession, rig: Rig, ticket: str, **extra: str
) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"User-Agent": PHONE_AGENT}
    async with http.post(
        f"{front_url(rig)}/relay/api/pair", json={"ticket": ticket, **extra}, headers=headers
    ) as response:
        return response.status, await response.json(), dict(response.headers)


def auth(rig: Rig) -> auth_pb2_grpc.AuthServiceStub:
    return auth_pb2_grpc.AuthServiceStub(rig.channel)


def caller(token: str, machine_id: str = MACHINE) -> tuple[tuple[str, str], ...]:
    """The metadata of a phone's calls to the machine with the relay token ``token``."""
    return (*bearer(token), ("x-machine-id", machine_id), ("x-client-id", "web-phone"))


def agent_as(rig: Rig, token: str, machine_id: str = MACHINE) -> tuple[Any, Any]:
    """An AgentService stub sealed to the machine's key, and a phone's metadata with
    ``token``."""
    return agent_pb2_grpc.AgentServiceStub(rig.sealed), caller(token, machine_id)


def gateway_as(rig: Rig, token: str) -> GatewayClient:
    """The phone's requests to the daemon's web API: WebGatewayService calls sealed to the
    machine's key, with a relay token (and a device credential once it has one)."""
    return GatewayClient(rig.sealed, "", "web-phone", caller(token))


async def devices_listed(rig: Rig, token: str) -> list[auth_pb2.DeviceLogin]:
    reply = await auth(rig).ListDevices(auth_pb2.ListDevicesRequest(), metadata=bearer(token))
    return list(reply.devices)


async def paired_phone(
    rig: Rig, http: aiohttp.ClientSession, relay_url: str
) -> tuple[dict[str, Any], GatewayClient, dict[str, Any]]:
    """A phone paired as the page does with `web pair`'s two halves: its relay login, its
    requests through the gateway (with its daemon credential), and that credential's device."""
    pairing = await relay_pairing(rig, relay_url)
    status, login, _ = await pair(http, rig, pairing.ticket)
    assert status == 200, login
    phone = gateway_as(rig, login["access_token"])
    status, device = await phone.call("POST", "/api/devices/pair", {"code": pairing.code})
    assert status == 201, device
    phone.credential = device["credential"]
    status, listed = await phone.call("GET", "/api/sessions")
    assert status == 200, listed
    return login, phone, device


async def test_a_ticket_logs_a_phone_in_once_for_its_one_machine(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    await rig.start_daemon()
    ticket = await new_ticket(rig)
    status, login, _ = await pair(http, rig, f" {ticket[:5].lower()}-{ticket[5:]} ")
    assert status == 200, login
    assert (login["user_id"], login["machine_id"]) == (rig.account.user_id, MACHINE)
    token = login["access_token"]
    assert login["refresh_token"]

    # Used: refused, however it is typed.
    status, refused, _ = await pair(http, rig, ticket)
    assert (status, refused["error"]["code"]) == (401, "UNAUTHENTICATED")
    assert "betcode web pair" in refused["error"]["message"]

    # The device's token reaches its machine (a sealed call to the daemon)...
    agent, metadata = agent_as(rig, token)
    listed = await agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=metadata)
    assert list(listed.sessions) == []
    # ...lists that machine alone...
    await register_machine(rig.channel, rig.account, "other")
    machines = machine_pb2_grpc.MachineServiceStub(rig.channel)
    mine = await machines.ListMachines(machine_pb2.ListMachinesRequest(), metadata=bearer(token))
    assert [m.machine_id for m in mine.machines] == [MACHINE]
    everything = await machines.ListMachines(
        machine_pb2.ListMachinesRequest(), metadata=bearer(rig.account.access)
    )
    assert sorted(m.machine_id for m in everything.machines) == [MACHINE, "other"]
    # ...and nothing else of the owner's: another machine, registering one.
    other, other_metadata = agent_as(rig, token, "other")
    with pytest.raises(grpc.aio.AioRpcError) as refused_call:
        await other.ListSessions(agent_pb2.ListSessionsRequest(), metadata=other_metadata)
    assert refused_call.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as not_found:
        await machines.GetMachine(
            machine_pb2.GetMachineRequest(machine_id="other"), metadata=bearer(token)
        )
    assert not_found.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as no_register:
        await register_machine(rig.channel, replace(rig.account, access=token), "third")
    assert no_register.value.code() == grpc.StatusCode.PERMISSION_DENIED

    # Listed for the owner, named after the browser, used just now.
    [device] = await devices_listed(rig, rig.account.access)
    assert (device.device_id, device.name) == (login["device_id"], "Chrome on Android")
    assert device.machine_id == MACHINE
    assert not device.HasField("revoked_at")
    assert device.last_used_at.ToSeconds() >= device.created_at.ToSeconds()

    # A refreshed token keeps the one machine.
    fresh = await auth(rig).RefreshToken(
        auth_pb2.RefreshTokenRequest(refresh_token=login["refresh_token"])
    )
    other, other_metadata = agent_as(rig, fresh.access_token, "other")
    with pytest.raises(grpc.aio.AioRpcError) as still_refused:
        await other.ListSessions(agent_pb2.ListSessionsRequest(), metadata=other_metadata)
    assert still_refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def accounts_db(rig: Rig) -> sqlite3.Connection:
    return sqlite3.connect(rig.relay.options.files.accounts_db)


async def test_an_expired_ticket_logs_nobody_in(rig: Rig, http: aiohttp.ClientSession) -> None:
    ticket = await new_ticket(rig)
    with accounts_db(rig) as database:  # five minutes on
        database.execute("UPDATE pairing_tickets SET expires_at = expires_at - 301")
    status, refused, _ = await pair(http, rig, ticket)
    assert (status, refused["error"]["code"]) == (401, "UNAUTHENTICATED")
    assert await devices_listed(rig, rig.account.access) == []


async def test_wrong_tickets_refuse_every_ticket_from_there_for_a_while(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    ticket = await new_ticket(rig)
    for wrong in range(MAX_WRONG_PER_ADDRESS):
        status, refused, _ = await pair(http, rig, f"000000000{wrong}")
        assert (status, refused["error"]["code"]) == (401, "UNAUTHENTICATED")
    status, refused, headers = await pair(http, rig, ticket)  # the right one, too late
    assert (status, refused["error"]["code"]) == (429, "RESOURCE_EXHAUSTED")
    assert "too many wrong pairing tickets" in refused["error"]["message"]
    assert 500 < int(headers["Retry-After"]) <= 600
    # Refused unread: the ticket was not used up by it.
    with accounts_db(rig) as database:
        assert database.execute("SELECT used FROM pairing_tickets").fetchall() == [(0,)]
    assert await devices_listed(rig, rig.account.access) == []


async def test_a_revoked_device_is_refused_at_once_calls_and_refresh(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    await rig.start_daemon()
    status, login, _ = await pair(http, rig, await new_ticket(rig), name="alice's phone")
    assert status == 200, login
    agent, metadata = agent_as(rig, login["access_token"])
    await agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=metadata)
    # Any login of the account lists and revokes devices (the phone itself, too).
    [device] = await devices_listed(rig, login["access_token"])
    assert device.name == "alice's phone"
    await auth(rig).RevokeDevice(
        auth_pb2.RevokeDeviceRequest(device_id=device.device_id),
        metadata=bearer(rig.account.access),
    )
    [revoked] = await devices_listed(rig, rig.account.access)
    assert revoked.HasField("revoked_at")
    with pytest.raises(grpc.aio.AioRpcError) as call_refused:
        await agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=metadata)
    assert call_refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as refresh_refused:
        await auth(rig).RefreshToken(
            auth_pb2.RefreshTokenRequest(refresh_token=login["refresh_token"])
        )
    assert refresh_refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    headers = {"Authorization": f"Bearer {login['access_token']}"}
    async with http.get(f"{front_url(rig)}/relay/api/machines", headers=headers) as listed:
        assert listed.status == 401
    async with http.get(f"{front_url(rig)}/relay/api/devices", headers=headers) as listed:
        assert listed.status == 401
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await auth(rig).RevokeDevice(
            auth_pb2.RevokeDeviceRequest(device_id=device.device_id),
            metadata=bearer(rig.account.access),
        )
    assert again.value.code() == grpc.StatusCode.NOT_FOUND
    # The owner's own login goes on.
    owner, owner_metadata = agent_as(rig, rig.account.access)
    await owner.ListSessions(agent_pb2.ListSessionsRequest(), metadata=owner_metadata)


async def test_a_phone_whose_code_the_daemon_refuses_revokes_its_own_relay_login(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    """What the page does when the daemon refuses the code (web-client/src/pairing.ts): the
    phone's relay login, just made, revokes itself at the front, so no half-paired phone stays
    listed; its tokens then work no more."""
    relay_url = remember_relay(rig)
    await rig.start_daemon()
    await until_reachable(rig)
    first = await relay_pairing(rig, relay_url)
    status, login, _ = await pair(http, rig, first.ticket)
    assert status == 200, login
    status, _ = await gateway_as(rig, login["access_token"]).call(
        "POST", "/api/devices/pair", {"code": first.code}
    )
    assert status == 201
    # A second phone, with a new ticket but the code already used.
    second = await relay_pairing(rig, relay_url)
    status, half, _ = await pair(http, rig, second.ticket)
    assert status == 200, half
    status, refused = await gateway_as(rig, half["access_token"]).call(
        "POST", "/api/devices/pair", {"code": first.code}
    )
    assert (status, refused["error"]["code"]) == (401, "CODE_REFUSED")
    own = {"Authorization": f"Bearer {half['access_token']}"}
    url = f"{front_url(rig)}/relay/api/devices/{half['device_id']}"
    async with http.delete(url, headers=own) as response:
        assert (response.status, await response.json()) == (200, {"revoked": True})
    listed = {d.device_id: d for d in await devices_listed(rig, rig.account.access)}
    assert listed[half["device_id"]].HasField("revoked_at")
    assert not listed[login["device_id"]].HasField("revoked_at")
    async with http.post(
        f"{front_url(rig)}/relay/api/refresh", json={"refresh_token": half["refresh_token"]}
    ) as response:
        assert response.status == 401


async def test_revoking_a_phone_at_the_relay_or_on_the_daemon_revokes_both(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    """A phone paired through the relay: its daemon credential is taken only with the relay
    login it paired with, so revoking that login at the relay ends it; `betcode web revoke` on
    the machine revokes the relay login too (calls and refresh)."""
    relay_url = remember_relay(rig)
    await rig.start_daemon()
    await until_reachable(rig)

    # The credential goes with its relay login only: not with the account's password login.
    login, phone, device = await paired_phone(rig, http, relay_url)
    as_owner = gateway_as(rig, rig.account.access)
    as_owner.credential = device["credential"]
    status, refused = await as_owner.call("GET", "/api/sessions")
    assert (status, refused["error"]["code"]) == (401, "UNAUTHENTICATED")
    assert "paired through the relay" in refused["error"]["message"]

    # Revoked at the relay: the phone's calls stop there, and its daemon credential is refused
    # with any other login.
    own = {"Authorization": f"Bearer {login['access_token']}"}
    url = f"{front_url(rig)}/relay/api/devices/{login['device_id']}"
    async with http.delete(url, headers=own) as response:
        assert response.status == 200
    with pytest.raises(grpc.aio.AioRpcError) as cut:
        await phone.call("GET", "/api/sessions")
    assert cut.value.code() == grpc.StatusCode.UNAUTHENTICATED
    status, refused = await as_owner.call("GET", "/api/sessions")
    assert (status, refused["error"]["code"]) == (401, "UNAUTHENTICATED")
    # The relay told the machine over its tunnel: the daemon lists the phone signed out.
    async with asyncio.timeout(10):
        while True:
            code, out, err = await web_command(rig, "devices")
            assert code == 0, err
            if f"{device['device_id']}  signed out" in out:
                break
            await asyncio.sleep(0.2)

    # Revoked on the daemon (`betcode web revoke`): its relay login is revoked too.
    login, phone, device = await paired_phone(rig, http, relay_url)
    code, _, err = await web_command(rig, "revoke", device["device_id"])
    assert code == 0, err
    listed = {d.device_id: d for d in await devices_listed(rig, rig.account.access)}
    assert listed[login["device_id"]].HasField("revoked_at")
    agent, metadata = agent_as(rig, login["access_token"])
    with pytest.raises(grpc.aio.AioRpcError) as call_refused:
        await agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=metadata)
    assert call_refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    async with http.post(
        f"{front_url(rig)}/relay/api/refresh", json={"refresh_token": login["refresh_token"]}
    ) as response:
        assert response.status == 401


async def test_a_phone_signed_out_while_the_relay_was_away_reaches_the_machine_no_more(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    """`betcode web revoke` while the daemon cannot reach the relay: the relay is not told, but
    once the daemon is back on the relay it refuses every call of that phone's relay login."""
    relay_url = remember_relay(rig)
    await rig.start_daemon()
    login, _, device = await paired_phone(rig, http, relay_url)
    await rig.stop_daemon()
    with_relay = rig.config
    rig.config = replace(rig.config, relay_urls=("https://127.0.0.1:9",))  # nobody there
    rig.daemon = Daemon(rig.config)
    await rig.daemon.start()
    code, _, err = await web_command(rig, "revoke", device["device_id"])
    assert code == 0, err
    await rig.stop_daemon()
    rig.config = with_relay
    await rig.start_daemon()

    [listed] = await devices_listed(rig, rig.account.access)
    assert not listed.HasField("revoked_at")  # the relay was not told
    agent, metadata = agent_as(rig, login["access_token"])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=metadata)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "signed out on the machine" in (refused.value.details() or "")
    # The account's own login goes on.
    owner, owner_metadata = agent_as(rig, rig.account.access)
    await owner.ListSessions(agent_pb2.ListSessionsRequest(), metadata=owner_metadata)


async def test_the_front_lists_and_revokes_devices_for_the_page(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    phones = []
    for name in ("phone", "tablet"):
        status, login, _ = await pair(http, rig, await new_ticket(rig), name=name)
        assert status == 200, login
        phones.append(login)
    url = f"{front_url(rig)}/relay/api/devices"
    as_phone = {"Authorization": f"Bearer {phones[0]['access_token']}"}
    async with http.get(url, headers=as_phone) as response:
        listed = (await response.json())["devices"]
    assert [(d["name"], d["machine_id"], d["revoked_at"]) for d in listed] == [
        ("phone", MACHINE, None),
        ("tablet", MACHINE, None),
    ]
    assert listed[0]["last_used_at"] >= listed[0]["created_at"] > 0
    # The phone at hand signs the lost tablet out.
    tablet = phones[1]["device_id"]
    async with http.delete(f"{url}/{tablet}", headers=as_phone) as response:
        assert (response.status, await response.json()) == (200, {"revoked": True})
    async with http.delete(f"{url}/{tablet}", headers=as_phone) as response:
        assert response.status == 404
    async with http.get(url, headers=as_phone) as response:
        listed = (await response.json())["devices"]
    assert [d["revoked_at"] is None for d in listed] == [True, False]
    as_tablet = {"Authorization": f"Bearer {phones[1]['access_token']}"}
    async with http.get(url, headers=as_tablet) as response:
        assert response.status == 401
    async with http.post(
        f"{front_url(rig)}/relay/api/refresh", json={"refresh_token": phones[1]["refresh_token"]}
    ) as response:
        assert response.status == 401


async def test_removing_the_machine_signs_its_paired_devices_out(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    status, login, _ = await pair(http, rig, await new_ticket(rig))
    assert status == 200, login
    machines = machine_pb2_grpc.MachineServiceStub(rig.channel)
    await machines.RemoveMachine(
        machine_pb2.RemoveMachineRequest(machine_id=MACHINE), metadata=bearer(rig.account.access)
    )
    [device] = await devices_listed(rig, rig.account.access)
    assert device.HasField("revoked_at")
    # Registered again under the same id: the old phone does not reach it.
    await register_machine(rig.channel, rig.account, MACHINE, machine_identity(rig))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await auth(rig).RefreshToken(
            auth_pb2.RefreshTokenRequest(refresh_token=login["refresh_token"])
        )
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_only_the_machine_itself_gets_a_ticket(rig: Rig) -> None:
    machines = machine_pb2_grpc.MachineServiceStub(rig.channel)
    for metadata in ((), bearer(rig.account.access)):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await machines.CreatePairingTicket(
                machine_pb2.CreatePairingTicketRequest(), metadata=metadata
            )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # A replaced certificate (the machine registered again) no longer gets one.
    identity = machine_identity(rig)
    old_key, old_cert = identity.private_key(), identity.certificate()
    await register_machine(rig.channel, rig.account, MACHINE, identity)
    with pytest.raises(grpc.aio.AioRpcError) as replaced:
        await machines.CreatePairingTicket(
            machine_pb2.CreatePairingTicketRequest(), metadata=proof_metadata(old_key, old_cert)
        )
    assert replaced.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "replaced" in (replaced.value.details() or "")


async def test_only_the_machine_revokes_its_own_paired_devices(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    status, login, _ = await pair(http, rig, await new_ticket(rig))
    assert status == 200, login
    machines = machine_pb2_grpc.MachineServiceStub(rig.channel)
    revoke = machine_pb2.RevokePairedDeviceRequest(device_id=login["device_id"])
    for metadata in ((), bearer(rig.account.access), bearer(login["access_token"])):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await machines.RevokePairedDevice(revoke, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # Another machine of the same owner revokes nothing of this one's.
    other = MachineIdentity(rig.config.config_dir / "other-certs")
    await register_machine(rig.channel, rig.account, "other", other)
    as_other = proof_metadata(other.private_key(), other.certificate())
    reply = await machines.RevokePairedDevice(revoke, metadata=as_other)
    assert not reply.revoked
    [device] = await devices_listed(rig, rig.account.access)
    assert not device.HasField("revoked_at")
    identity = machine_identity(rig)
    as_machine = proof_metadata(identity.private_key(), identity.certificate())
    assert (await machines.RevokePairedDevice(revoke, metadata=as_machine)).revoked
    assert not (await machines.RevokePairedDevice(revoke, metadata=as_machine)).revoked
    [device] = await devices_listed(rig, rig.account.access)
    assert device.HasField("revoked_at")


def test_a_device_is_named_after_its_browser() -> None:
    iphone = (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
        "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1"
    )
    assert device_name(iphone) == "Safari on iPhone"
    assert device_name(PHONE_AGENT) == "Chrome on Android"
    assert device_name("") == "a browser"


async def test_web_pair_shows_the_relay_pairing_link_as_a_qr_code(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    rig.config = replace(
        rig.config, settings=DaemonSettings(http=HttpSettings(listen="127.0.0.1:0"))
    )
    relay_url = remember_relay(rig)
    await rig.start_daemon()
    await until_reachable(rig)
    pairing = await relay_pairing(rig, relay_url)
    ticket, daemon_code, text = pairing.ticket, pairing.code, pairing.text
    key = e2e.DaemonIdentity.load_or_create(machine_identity(rig).e2e_key_file).public
    assert f"open {relay_url} and type the code" in text
    assert e2e.fingerprint(key) in text
    assert "once, within 5 minutes" in text
    # The relay was registered at 127.0.0.1: the phone needs another name for it.
    assert text.splitlines()[-1] == RELAY_LOOPBACK_HINT.format(url=relay_url)

    # Both halves work, as the phone uses them: the ticket at the relay, then the code at the
    # daemon, sealed through its web gateway with the device login's token.
    status, login, _ = await pair(http, rig, ticket)
    assert (status, login["machine_id"]) == (200, MACHINE)
    phone = gateway_as(rig, login["access_token"])
    status, device = await phone.call("POST", "/api/devices/pair", {"code": daemon_code})
    assert status == 201, device
    phone.credential = device["credential"]
    status, listed = await phone.call("GET", "/api/sessions")
    assert status == 200, listed
    # The daemon's devices, listed and revoked through the relay too (the app's devices page).
    status, devices = await phone.call("GET", "/api/devices")
    assert [d["device_id"] for d in devices["devices"]] == [device["device_id"]]
    status, _ = await phone.call("DELETE", f"/api/devices/{device['device_id']}")
    assert status == 200
    # Its relay login went with it: the phone is refused at the relay.
    with pytest.raises(grpc.aio.AioRpcError) as refused_at_relay:
        await phone.call("GET", "/api/sessions")
    assert refused_at_relay.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # Used: the code does not pair a second browser.
    status, refused = await gateway_as(rig, rig.account.access).call(
        "POST", "/api/devices/pair", {"code": daemon_code}
    )
    assert (status, refused["error"]["code"]) == (401, "CODE_REFUSED")
    assert rig.daemon is not None
    assert rig.daemon.web is not None

    # --lan: the daemon's own address, as without a relay.
    code, out, err = await web_pair(rig, "--lan")
    assert code == 0, err
    assert f"open {rig.daemon.web.url} and type the code" in out
    assert "#pair=" not in json.dumps(out)


async def test_web_pair_through_the_relay_with_no_lan_address(
    rig: Rig, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """A daemon that only dials the relay (no LAN web listener): `web pair` makes its code on
    the daemon's socket, the phone pairs through the relay, and the owner lists and revokes the
    daemon's devices there too; the same calls made through the relay are refused."""
    relay_url = remember_relay(rig)
    await rig.start_daemon()
    await until_reachable(rig)
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    assert rig.daemon.web.url is None  # no LAN address
    _, _, device = await paired_phone(rig, http, relay_url)

    # Sign-ins are made on the machine: the owner's service is refused through the relay.
    sign_ins = web_access_pb2_grpc.WebAccessServiceStub(rig.sealed)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await sign_ins.CreateSignIn(
            web_access_pb2.CreateSignInRequest(kind=web_access_pb2.SIGN_IN_KIND_PAIRING_CODE),
            metadata=caller(rig.account.access),
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED

    code, out, err = await web_command(rig, "devices")
    assert code == 0, err
    [line] = out.splitlines()
    assert line.startswith(f"{device['device_id']}  signed in")
    code, out, err = await web_command(rig, "revoke", device["device_id"])
    assert code == 0, err
    code, out, err = await web_command(rig, "devices")
    assert out.startswith(f"{device['device_id']}  signed out"), out
    code, _, err = await web_command(rig, "revoke", device["device_id"])
    assert code == 1
    assert "no signed-in device" in err
    # --lan needs the LAN address the daemon does not have: said before any code is made.
    code, _, err = await web_pair(rig, "--lan")
    assert code == 1
    assert "serves no web client" in err


async def test_web_pair_through_the_relay_needs_a_registered_machine(rig: Rig) -> None:
    machine_identity(rig).info_file.unlink()
    code, _, err = await web_pair(rig, "--relay")
    assert code == 1
    assert "not registered with a relay" in err


async def test_the_cli_lists_and_revokes_paired_devices(
    rig: Rig, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    status, login, _ = await pair(http, rig, await new_ticket(rig))
    assert status == 200, login
    env = {
        **os.environ,
        "BETCODE_CONFIG_DIR": str(tmp_path / "laptop"),
        "BETCODE_PASSWORD": "pw-123456",
    }

    async def betcode(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "betcode.cli.main",
            "--relay", f"https://127.0.0.1:{rig.relay.port}",
            "--relay-custom-ca-cert", str(rig.relay.options.files.ca_cert),
            *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    assert (await betcode("auth", "login", "-u", "alice"))[0] == 0
    code, out, err = await betcode("auth", "devices")
    assert code == 0, err
    [line] = out.splitlines()
    assert line.startswith(login["device_id"])
    assert MACHINE in line
    assert "signed in" in line
    assert line.endswith("Chrome on Android")
    code, out, err = await betcode("auth", "revoke", login["device_id"])
    assert (code, out.strip()) == (
        0,
        f"device {login['device_id']} revoked; its tokens no longer work",
    )
    code, out, _ = await betcode("auth", "devices")
    assert "revoked" in out
    code, _, err = await betcode("auth", "revoke", login["device_id"])
    assert code != 0
    assert "no signed-in device" in err
    with pytest.raises(grpc.aio.AioRpcError):
        await auth(rig).RefreshToken(
            auth_pb2.RefreshTokenRequest(refresh_token=login["refresh_token"])
        )


async def test_pairing_on_a_relay_sharing_postgresql(tmp_path: Path) -> None:
    """The same tickets and device logins in PostgreSQL (the schema and queries several relay
    instances share): used once, listed, revoked with its tokens, gone with its machine."""
    with postgres() as database_url:
        async with (
            relay_in_process(tmp_path / "relay", database_url=database_url) as relay,
            client_channel(relay) as channel,
        ):
            account = await register(channel, "alice")
            identity = MachineIdentity(tmp_path / "machine" / "certs")
            await register_machine(channel, account, MACHINE, identity)
            proof = proof_metadata(identity.private_key(), identity.certificate())
            made = await machine_pb2_grpc.MachineServiceStub(channel).CreatePairingTicket(
                machine_pb2.CreatePairingTicketRequest(), metadata=proof
            )
            stub = auth_pb2_grpc.AuthServiceStub(channel)
            login = await stub.PairDevice(auth_pb2.PairDeviceRequest(ticket=made.ticket))
            assert login.machine_id == MACHINE
            with pytest.raises(grpc.aio.AioRpcError) as used:
                await stub.PairDevice(auth_pb2.PairDeviceRequest(ticket=made.ticket))
            assert used.value.code() == grpc.StatusCode.UNAUTHENTICATED
            fresh = await stub.RefreshToken(
                auth_pb2.RefreshTokenRequest(refresh_token=login.refresh_token)
            )
            listed = await stub.ListDevices(
                auth_pb2.ListDevicesRequest(), metadata=bearer(fresh.access_token)
            )
            assert [d.device_id for d in listed.devices] == [login.device_id]
            await machine_pb2_grpc.MachineServiceStub(channel).RemoveMachine(
                machine_pb2.RemoveMachineRequest(machine_id=MACHINE),
                metadata=bearer(account.access),
            )
            with pytest.raises(grpc.aio.AioRpcError) as revoked:
                await stub.RefreshToken(
                    auth_pb2.RefreshTokenRequest(refresh_token=fresh.refresh_token)
                )
            assert revoked.value.code() == grpc.StatusCode.UNAUTHENTICATED
