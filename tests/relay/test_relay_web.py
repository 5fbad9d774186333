"""The relay's web front (on the relay's one client address) with a real relay (its own
nats-server), a real daemon on the tunnel and the pinned real CLI: a relay account's login, the
machines with their state, and calls carried to the machine as the browser makes them,
end-to-end encrypted with the browser's keys (here the Python implementation, which
web-client/src/e2e.ts matches byte for byte): NATS sees no plaintext. In Chromium at phone
size: login, the machine listed online, opened with its fingerprint shown and its sessions
listed; a changed key refused; a real-CLI tool call allowed from the page runs exactly once,
while no NATS message and no relay file holds the command."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from harness.browser import chromium, require_chromium
from harness.environment import Workspace
from harness.relay import MACHINE, Rig, rig_fixture, stored_text, until, waiting_permission
from harness.relay import login as login_grpc

from betcode.relay.buffer import BufferSettings
from betcode.remote import e2e
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import agent_pb2, auth_pb2, auth_pb2_grpc, tunnel_pb2

pytestmark = pytest.mark.real_cli
playwright_api = require_chromium("the relay web front's browser test")
expect = playwright_api.expect

PHONE = {"width": 390, "height": 844}
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
EXCHANGE = "betcode.v1.AgentService/ExchangeKeys"
LIST = "betcode.v1.AgentService/ListSessions"

rig = pytest.fixture(rig_fixture(BufferSettings()))


def web_url(rig: Rig) -> str:
    return f"https://127.0.0.1:{rig.relay.port}"


@pytest.fixture
async def http(rig: Rig) -> AsyncIterator[aiohttp.ClientSession]:
    trusted = ssl.create_default_context(cafile=str(rig.relay.options.files.ca_cert))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as session:
        yield session


def daemon_identity(rig: Rig) -> bytes:
    key_file = MachineIdentity(rig.config.config_dir / "certs").e2e_key_file
    return e2e.DaemonIdentity.load_or_create(key_file).public


async def relay_call(
    http: aiohttp.ClientSession,
    rig: Rig,
    token: str,
    method: str,
    messages: list[bytes],
    header: str = "",
) -> tuple[list[bytes], dict[str, str]]:
    """One call through the front's WebSocket, as web-client/src/relay.ts makes it."""
    url = f"{web_url(rig)}/relay/api/machines/{MACHINE}/call"
    answers: list[bytes] = []
    async with http.ws_connect(url, protocols=("betcode",)) as socket:
        await socket.send_str(json.dumps({"method": method, "e2e": header, "token": token}))
        for message in messages:
            await socket.send_bytes(message)
        await socket.send_str("end")
        async for frame in socket:
            if frame.type is aiohttp.WSMsgType.BINARY:
                answers.append(frame.data)
            else:
                return answers, json.loads(frame.data)
    raise AssertionError("the call ended without a status")


async def login(http: aiohttp.ClientSession, rig: Rig, password: str = "pw-123456") -> Any:
    body = {"username": "alice", "password": password}
    async with http.post(f"{web_url(rig)}/relay/api/login", json=body) as response:
        return response.status, await response.json()


async def test_login_machines_and_an_encrypted_call_carried_as_ciphertext(
    rig: Rig, http: aiohttp.ClientSession, workspace: Workspace
) -> None:
    await rig.start_daemon()
    start = agent_pb2.StartConversation(working_directory=str(workspace.repo))
    session_id, _ = await waiting_permission(rig, start)

    async with http.get(web_url(rig) + "/") as page:
        assert page.status == 200
        assert "/static/relay.js" in await page.text()
    status, refused = await login(http, rig, "wrong-password")
    assert status == 401, refused
    status, logged_in = await login(http, rig)
    assert status == 200, logged_in
    token = logged_in["access_token"]
    headers = {"Authorization": f"Bearer {token}"}
    async with http.get(f"{web_url(rig)}/relay/api/machines", headers=headers) as listed:
        machines = (await listed.json())["machines"]
    assert [(m["machine_id"], m["status"]) for m in machines] == [
        (MACHINE, "MACHINE_STATUS_ONLINE")
    ]

    seen: list[bytes] = []

    async def spy(msg: Any) -> None:
        seen.append(msg.data)

    assert rig.relay.nc is not None
    subscription = await rig.relay.nc.subscribe(">", cb=spy)
    handshake = e2e.ClientHandshake()
    request = handshake.request(MACHINE).SerializeToString()
    [answer], end = await relay_call(http, rig, token, EXCHANGE, [request])
    assert end["code"] == "OK"
    exchanged = tunnel_pb2.KeyExchangeResponse.FromString(answer)
    assert exchanged.daemon_identity_pubkey == daemon_identity(rig)
    session = handshake.complete(
        exchanged.daemon_ephemeral_pubkey, exchanged.daemon_identity_pubkey
    )
    header, cipher = session.next_call(LIST)
    [sealed], end = await relay_call(http, rig, token, LIST, [cipher.seal(b"")], header)
    assert end["code"] == "OK", end
    sessions = agent_pb2.ListSessionsResponse.FromString(cipher.open(sealed)).sessions
    assert [s.id for s in sessions] == [session_id]
    await subscription.unsubscribe()
    carried = b"".join(seen)
    assert seen
    assert session_id.encode() not in carried
    assert str(workspace.repo).encode() not in carried

    # Unencrypted, the daemon refuses it; without a token, the relay does.
    _, end = await relay_call(http, rig, token, LIST, [b""])
    assert end["code"] == "UNAUTHENTICATED"
    _, end = await relay_call(http, rig, "not-a-token", LIST, [b""])
    assert end["code"] == "UNAUTHENTICATED"


async def phone_signed_in(browser: Any, rig: Rig) -> tuple[Any, Any]:
    """A phone-sized page of the relay's front, alice logged in: (its context, the page)."""
    context = await browser.new_context(
        viewport=PHONE, is_mobile=True, has_touch=True, ignore_https_errors=True
    )
    page = await context.new_page()
    await page.goto(web_url(rig) + "/")
    await page.get_by_label("Username").fill("alice")
    await page.get_by_label("Password").fill("pw-123456")
    await page.get_by_role("button", name="Sign in").click()
    return context, page


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with chromium(playwright_api) as launched:
        yield launched


async def test_a_phone_logs_in_opens_the_machine_and_refuses_a_changed_key(
    rig: Rig, browser: Any, workspace: Workspace
) -> None:
    await rig.start_daemon()
    start = agent_pb2.StartConversation(working_directory=str(workspace.repo))
    await waiting_permission(rig, start)
    context, page = await phone_signed_in(browser, rig)
    machine = page.locator("#machine-list li", has_text=MACHINE)
    await expect(machine).to_contain_text("online")
    await machine.get_by_role("button").click()
    await expect(page.locator("#fingerprint")).to_have_text(e2e.fingerprint(daemon_identity(rig)))
    await expect(page.locator("#machine-sessions")).to_contain_text(str(workspace.repo))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "relay-phone.png"), full_page=True)

    # Another key pinned for the machine (as if its key had changed since): refused.
    await page.evaluate(f"localStorage.setItem('betcode-pin:{MACHINE}', '{'07' * 32}')")
    await page.get_by_role("button", name="← Machines").click()
    await machine.get_by_role("button").click()
    await expect(page.locator("#machine-error")).to_contain_text("Refused")
    await expect(page.locator("#machine-error")).to_contain_text("another identity key")
    await expect(page.locator("#machine-sessions")).to_be_empty()
    await context.close()


SECRET = "phone-secret-5150"
LATER_SECRET = "later-secret-6060"
LATER_PROMPT = f'SCN:plain {{"text": "{LATER_SECRET}"}} again'


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


async def test_a_phone_starts_a_session_allows_its_tool_once_and_the_relay_sees_no_plaintext(
    rig: Rig, browser: Any, workspace: Workspace
) -> None:
    await rig.start_daemon()
    seen: list[bytes] = []

    async def spy(msg: Any) -> None:
        seen.append(msg.data)
        seen.extend(str(value).encode() for value in (msg.headers or {}).values())

    assert rig.relay.nc is not None
    subscription = await rig.relay.nc.subscribe(">", cb=spy)
    marker = workspace.repo / "ran.txt"
    command = json.dumps({"command": f"echo {SECRET} >> {marker.name}"})

    context, page = await phone_signed_in(browser, rig)
    await page.locator("#machine-list li", has_text=MACHINE).get_by_role("button").click()
    await expect(page.locator("#machine-waiting")).to_contain_text("Nothing waits")
    # The phone starts the session itself, in the machine's repository.
    await page.get_by_label("Directory on the machine").fill(str(workspace.repo))
    await page.get_by_label("First prompt").fill(f"SCN:tool_bash {command} run it")
    await page.get_by_role("button", name="Start session").click()
    waiting = page.locator("#machine-waiting li", has_text="Bash")
    await expect(waiting).to_contain_text(SECRET)  # opened in the page, from ciphertext
    await waiting.get_by_role("button", name="Allow once").click()
    await expect(page.locator("#machine-outcome")).to_have_text("Bash: allowed")
    await expect(page.locator("#machine-waiting")).to_contain_text("Nothing waits")
    # The session's conversation, followed live on the phone: the prompt, the tool call, the
    # end of the turn, opened from ciphertext in the page.
    await page.locator("#machine-sessions").get_by_role("button").click()
    conversation = page.locator("#session-events")
    await expect(conversation.locator(".tool")).to_contain_text(f"Bash echo {SECRET}")
    await expect(conversation.locator(".user")).to_contain_text("SCN:tool_bash")
    await expect(conversation.locator(".note", has_text="turn complete")).to_have_count(1)
    # A later message from the phone, on the same sealed call: its turn shows there.
    await page.get_by_label("Message", exact=True).fill(LATER_PROMPT)
    await page.get_by_role("button", name="Send").click()
    await expect(conversation.locator(".text", has_text=LATER_SECRET)).to_have_count(1)
    await expect(conversation.locator(".note", has_text="turn complete")).to_have_count(2)
    # A question from claude, answered on the phone.
    await page.get_by_label("Message", exact=True).fill('SCN:ask {"questions": 2} ask me')
    await page.get_by_role("button", name="Send").click()
    question = page.locator("#machine-waiting li", has=page.locator("fieldset"))
    await expect(question.locator("fieldset")).to_have_count(2)
    await question.get_by_role("button", name="Submit answers").click()
    await expect(question.get_by_role("alert")).to_have_text("Answer every question first.")
    for index in range(2):
        await question.locator("fieldset").nth(index).get_by_role("radio").first.check()
    await question.get_by_role("button", name="Submit answers").click()
    await expect(page.locator("#machine-waiting")).to_contain_text("Nothing waits")
    await expect(conversation.locator(".note", has_text="turn complete")).to_have_count(3)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "relay-phone-session.png"), full_page=True)
    listed = await rig.agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=rig.metadata)
    [session_id] = [s.id for s in listed.sessions]
    await context.close()

    async def turn_ended() -> bool:
        return "turn_complete" in await stored_text(rig, session_id)

    await until(turn_ended)
    assert marker.read_text().splitlines() == [SECRET]  # the tool ran exactly once
    await subscription.unsubscribe()
    assert seen
    carried = b"".join(seen)
    assert SECRET.encode() not in carried
    assert LATER_SECRET.encode() not in carried
    assert session_id.encode() not in carried
    for path in files_under(rig.relay.options.files.root):
        assert SECRET.encode() not in path.read_bytes(), path


async def test_the_front_refuses_bad_calls_and_too_many_logins(
    rig: Rig, http: aiohttp.ClientSession
) -> None:
    status, logged_in = await login(http, rig)
    assert status == 200
    token = logged_in["access_token"]
    url = f"{web_url(rig)}/relay/api/machines/{MACHINE}/call"
    refusals = []
    for opening in (
        "not json",
        json.dumps({"e2e": ""}),  # no method
        json.dumps({"method": "grpc.health.v1.Health/Check", "token": token}),
        json.dumps({"method": LIST, "token": "tok\u00e9n"}),  # not printable ASCII
    ):
        async with http.ws_connect(url, protocols=("betcode",)) as socket:
            await socket.send_str(opening)
            refusals.append(json.loads((await socket.receive()).data)["code"])
    assert refusals == ["INVALID_ARGUMENT"] * 4
    # The machine is offline (no daemon): a read is refused as for any client.
    _, end = await relay_call(http, rig, token, LIST, [b""])
    assert end["code"] == "UNAVAILABLE"
    # Logins: 10 a minute from one browser address (this one's first included), then refused.
    statuses = [(await login(http, rig, "wrong-password"))[0] for _ in range(9)]
    assert set(statuses) == {401}
    status, body = await login(http, rig)
    assert status == 429, body
    assert "too many attempts" in body["error"]["message"]
    # Counted per browser, not as the front's loopback address: a gRPC client on loopback is
    # counted apart, and one that names a browser's address without the front's secret is
    # counted by its own address, whatever address it names.
    assert (await login_grpc(rig.channel, "alice")).access
    stub = auth_pb2_grpc.AuthServiceStub(rig.channel)
    wrong = auth_pb2.LoginRequest(username="alice", password="wrong-password")
    codes = []
    for number in range(10):
        forged = (("x-betcode-front", "guess"), ("x-betcode-forwarded-for", f"10.0.0.{number}"))
        try:
            await stub.Login(wrong, metadata=forged)
        except grpc.aio.AioRpcError as error:
            codes.append(error.code())
    assert codes[-1] == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_an_approval_given_while_the_machine_is_away_runs_once_it_is_back(
    rig: Rig, browser: Any, workspace: Workspace
) -> None:
    await rig.start_daemon()
    marker = workspace.repo / "away.txt"
    command = json.dumps({"command": f"echo {SECRET} >> {marker.name}"})
    start = agent_pb2.StartConversation(working_directory=str(workspace.repo))
    session_id, _ = await waiting_permission(rig, start, f"SCN:tool_bash {command} run it")
    context, page = await phone_signed_in(browser, rig)
    await page.locator("#machine-list li", has_text=MACHINE).get_by_role("button").click()
    waiting = page.locator("#machine-waiting li", has_text="Bash")
    await expect(waiting).to_contain_text(SECRET)

    # As `daemon restart` does: the asking claude waits on under its holder for the answer.
    await rig.stop_daemon(keep_sessions=True)
    await waiting.get_by_role("button", name="Allow once").click()
    await expect(page.locator("#machine-outcome")).to_contain_text(
        f"Bash: queued on the relay until {MACHINE} reconnects (place"
    )
    await context.close()
    assert not marker.exists()

    await rig.start_daemon()

    async def turn_ended() -> bool:
        return "turn_complete" in await stored_text(rig, session_id)

    await until(turn_ended, 90)
    assert marker.read_text().splitlines() == [SECRET]  # the tool ran, exactly once
    assert rig.relay.buffer is not None
    assert not await rig.relay.buffer.pending(MACHINE)
