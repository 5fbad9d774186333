"""The relay's web front (on the relay's one client address) with a real relay (its own
nats-server), a real daemon on the tunnel and the pinned real CLI: the app's page, a relay
account's login, the machines with their state, and calls carried to the machine as the browser
makes them, end-to-end encrypted with the browser's keys (here the Python implementation, which
web-client/src/e2e.ts matches byte for byte): NATS sees no plaintext. The page itself, in
Chromium: tests/relay/test_relay_web_app.py."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest
from harness.environment import Workspace
from harness.relay import MACHINE, Rig, rig_fixture, waiting_permission
from harness.relay import login as login_grpc

from betcode.relay.buffer import BufferSettings
from betcode.remote import e2e
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import agent_pb2, auth_pb2, auth_pb2_grpc, tunnel_pb2

pytestmark = pytest.mark.real_cli

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
    """One call through the front's WebSocket, as web-client/src/transport.ts makes it."""
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
        html = await page.text()
        assert 'data-origin="relay"' in html  # the app, at the relay's address
        assert "/static/app.js" in html
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
