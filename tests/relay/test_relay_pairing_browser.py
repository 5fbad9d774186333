"""Pairing a phone through the relay in Chromium at phone size (390×844): the link of `betcode
web pair`'s QR code opened, and the phone is signed in to the relay and to the machine's daemon
with no password typed, the machine's sessions listed; the relay and the daemon each list it as
a device. Then the same link again: used, it signs nobody in; the typed form of another
pairing, on the relay's sign-in screen, does; the first phone signs that one out."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from harness.browser import PHONE, chromium, phone_page, require_chromium
from harness.environment import Workspace
from harness.pairing import relay_pairing, remember_relay
from harness.relay import (
    MACHINE,
    Rig,
    bearer,
    rig_fixture,
    until_reachable,
    waiting_permission,
)
from harness.web import WebClient
from harness.web_gateway import GatewayClient

from betcode.config.settings import HttpSettings
from betcode.relay.buffer import BufferSettings
from betcode.remote import e2e
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import agent_pb2, auth_pb2, auth_pb2_grpc
from betcode.web.token import read_or_create_token

pytestmark = pytest.mark.real_cli
playwright_api = require_chromium("pairing a phone through the relay")
expect = playwright_api.expect

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"

rig = pytest.fixture(rig_fixture(BufferSettings()))


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with chromium(playwright_api) as launched:
        yield launched


@pytest.fixture
async def phone(browser: Any) -> AsyncIterator[Any]:
    async with phone_page(browser, ignore_https_errors=True) as page:
        yield page


def phone_caller(token: str) -> tuple[tuple[str, str], ...]:
    return (*bearer(token), ("x-machine-id", MACHINE), ("x-client-id", "web-phone"))


async def pair_at_front(rig: Rig, ticket: str) -> tuple[int, dict[str, Any]]:
    """The ticket traded at the relay's front as a phone does (`POST /relay/api/pair`)."""
    trusted = ssl.create_default_context(cafile=str(rig.relay.options.files.ca_cert))
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as http,
        http.post(
            f"https://127.0.0.1:{rig.relay.port}/relay/api/pair", json={"ticket": ticket}
        ) as response,
    ):
        return response.status, await response.json()


def machine_fingerprint(rig: Rig) -> str:
    key_file = MachineIdentity(rig.config.config_dir / "certs").e2e_key_file
    return e2e.fingerprint(e2e.DaemonIdentity.load_or_create(key_file).public)


async def test_the_pairing_link_signs_a_phone_in_through_the_relay_without_a_password(
    rig: Rig, phone: Any, browser: Any, workspace: Workspace
) -> None:
    # The daemon serves its web client on loopback too: `web pair` makes its codes there.
    http = HttpSettings(listen="127.0.0.1:0")
    rig.config = replace(rig.config, settings=replace(rig.config.settings, http=http))
    relay_url = remember_relay(rig)
    await rig.start_daemon()
    start = agent_pb2.StartConversation(working_directory=str(workspace.repo))
    await waiting_permission(rig, start)
    pairing = await relay_pairing(rig, relay_url)

    await phone.goto(pairing.url)
    await expect(phone.get_by_role("heading", name="Sessions")).to_be_visible()
    await expect(phone.locator("#fingerprint")).to_have_text(machine_fingerprint(rig))
    await expect(phone.locator("#sessions-view")).to_contain_text(workspace.repo.name)
    assert "#pair=" not in phone.url  # taken out of the address bar (and the history)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await phone.screenshot(path=str(ARTIFACTS / "relay-paired-phone.png"), full_page=True)

    # A device of the relay account, for that machine; a device of the daemon.
    listed = await auth_pb2_grpc.AuthServiceStub(rig.channel).ListDevices(
        auth_pb2.ListDevicesRequest(), metadata=bearer(rig.account.access)
    )
    [device] = listed.devices
    assert device.machine_id == MACHINE
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    assert rig.daemon.web.url is not None
    owner = WebClient(rig.daemon.web.url, read_or_create_token(rig.config.config_dir))
    try:
        status, body = await owner.call("GET", "/api/devices")
    finally:
        await owner.close()
    assert status == 200
    assert [d["signed_in"] for d in body["devices"]] == [True]

    # The same link in another browser: used, refused, and said so.
    context = await browser.new_context(viewport=PHONE, ignore_https_errors=True)
    again = await context.new_page()
    await again.goto(pairing.url)
    await expect(again.locator("#relay-login-error")).to_contain_text("used already")
    # The typed form of a new pairing, on the relay's sign-in screen.
    typed = (await relay_pairing(rig, relay_url)).text.split("type the code:", 1)[1].split()[0]
    await again.get_by_label("Code from the machine").fill(typed.lower())
    await again.get_by_role("button", name="Pair").click()
    await expect(again.get_by_role("heading", name="Sessions")).to_be_visible()
    await expect(again.locator("#fingerprint")).to_have_text(machine_fingerprint(rig))
    await context.close()

    # The first phone lists both on the relay's machines screen and signs the other one out.
    await phone.get_by_role("button", name="← Machines").click()
    await phone.locator("#relay-devices summary").click()
    paired = phone.locator("#relay-device-list li")
    await expect(paired).to_have_count(2)
    await expect(paired.first).to_contain_text(MACHINE)
    phone.once("dialog", lambda dialog: dialog.accept())
    await paired.nth(1).get_by_role("button", name="Revoke").click()
    await expect(paired).to_have_count(1)
    listed = await auth_pb2_grpc.AuthServiceStub(rig.channel).ListDevices(
        auth_pb2.ListDevicesRequest(), metadata=bearer(rig.account.access)
    )
    assert [d.HasField("revoked_at") for d in listed.devices] == [False, True]


async def test_a_refused_code_leaves_no_relay_login_behind(rig: Rig, phone: Any) -> None:
    """The daemon refuses the code (used already): the page revokes the relay login it just
    made, says why, and keeps no relay tokens. The daemon has no LAN address: `web pair` makes
    its codes on the daemon's socket."""
    relay_url = remember_relay(rig)
    await rig.start_daemon()
    await until_reachable(rig)
    used = await relay_pairing(rig, relay_url)
    status, login = await pair_at_front(rig, used.ticket)
    assert status == 200, login
    gateway = GatewayClient(rig.sealed, "", "web-phone", phone_caller(login["access_token"]))
    status, _ = await gateway.call("POST", "/api/devices/pair", {"code": used.code})
    assert status == 201
    fresh = await relay_pairing(rig, relay_url)

    await phone.goto(fresh.url.replace(f".{fresh.code}&", f".{used.code}&"))
    error = phone.locator("#relay-login-error")
    await expect(error).to_contain_text("the machine refused the code")
    await expect(error).to_contain_text("this phone's relay sign-in was removed")
    assert await phone.evaluate("localStorage.getItem('betcode-relay-tokens')") is None
    listed = await auth_pb2_grpc.AuthServiceStub(rig.channel).ListDevices(
        auth_pb2.ListDevicesRequest(), metadata=bearer(rig.account.access)
    )
    assert [d.HasField("revoked_at") for d in listed.devices] == [False, True]
