"""WebGatewayService on the daemon's own gRPC socket (the relay's side is in
tests/relay/test_relay_web_gateway.py): the web handlers serve its requests with a device's
credential only, what is not an /api/ request is refused, refusals are HTTP statuses, the
stream is the LAN page's stream, and a revocation closes it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import grpc.aio
import pytest
from harness.conditions import until
from harness.daemon import daemon_config
from harness.environment import Workspace
from harness.web import WebClient, new_link, sign_in
from harness.web_gateway import GatewayClient, GatewaySocket

from betcode.config.settings import DaemonSettings, HttpSettings
from betcode.config.values import MIB
from betcode.daemon import Daemon, DaemonConfig
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.server.web_gateway_service import MAX_BODY_BYTES
from betcode.v1 import web_gateway_pb2, web_gateway_pb2_grpc
from betcode.web.token import token_path

PLAIN_PROMPT = 'SCN:plain {"text": "through the gateway"} hi'
POOL_BEYOND = 110


def config_for(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace, lan: bool
) -> DaemonConfig:
    http = HttpSettings(listen="127.0.0.1:0" if lan else "")
    settings = DaemonSettings(max_payload_bytes=MIB, http=http)
    config = daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url))
    return replace(config, settings=settings)


@pytest.fixture
async def daemon(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[Daemon]:
    started = Daemon(config_for(tmp_path, claude_bin, mock_api, workspace, lan=True))
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


@pytest.fixture
async def channel(daemon: Daemon) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"unix:{daemon.config.socket_path}") as opened:
        yield opened


def owner_token(daemon: Daemon) -> str:
    return token_path(daemon.config.config_dir).read_text().strip()


def lan_url(daemon: Daemon) -> str:
    assert daemon.web is not None
    assert daemon.web.url is not None
    return daemon.web.url


async def test_the_api_answers_a_device_and_refuses_the_owner_token_and_strangers(
    daemon: Daemon, channel: grpc.aio.Channel, workspace: Workspace
) -> None:
    device = await sign_in(lan_url(daemon), owner_token(daemon), "phone")
    phone = GatewayClient(channel, device["credential"], "web-phone")
    session_id = await phone.create_session(str(workspace.repo))
    status, listed = await phone.call("GET", "/api/sessions")
    assert status == 200
    assert [s["id"] for s in listed["sessions"]] == [session_id]
    answer = await phone.fetch("GET", "/api/sessions")
    assert answer.headers["content-type"].startswith("application/json")
    assert "content-length" not in answer.headers  # the hop's, not the answer's

    # No credential, or the access token (good on the LAN): 401 in the answer, saying why.
    status, body = await GatewayClient(channel, "").call("GET", "/api/sessions")
    assert (status, body["error"]["code"]) == (401, "UNAUTHENTICATED")
    assert "betcode web" in body["error"]["message"]
    status, body = await GatewayClient(channel, owner_token(daemon)).call("GET", "/api/sessions")
    assert status == 401
    assert "not with the access token" in body["error"]["message"]
    # Pairing is public there as on the LAN: a link the owner made, exchanged through it.
    link = (await new_link(lan_url(daemon), owner_token(daemon))).rsplit("#link=", 1)[1]
    status, paired = await GatewayClient(channel, "").call(
        "POST", "/api/devices/pair", {"link": link, "name": "tablet"}
    )
    assert (status, paired["name"]) == (201, "tablet")
    assert (await GatewayClient(channel, paired["credential"]).call("GET", "/api/sessions"))[
        0
    ] == 200
    # A handler's refusal is a status too, not a gRPC error.
    status, body = await phone.call("GET", "/api/sessions/no-such-session/events")
    assert status == 404, body
    # Headers beyond the allowlist are dropped: an Origin the LAN page would be refused for
    # never reaches the handlers.
    answer = await phone.fetch("GET", "/api/sessions", origin="http://evil.test")
    assert answer.status == 200


async def test_a_lan_client_cannot_pass_for_relayed(daemon: Daemon) -> None:
    """The owner's token is refused to relayed requests only: a LAN request claiming to be
    relayed in every header it can still gets the owner's answer."""
    claims = {"X-BetCode-Relayed": "1", "Forwarded": "for=relay", "X-Relay-User-Id": "alice"}
    owner = WebClient(lan_url(daemon), owner_token(daemon))
    owner.http.headers.update(claims)
    try:
        status, _ = await owner.call("GET", "/api/sessions")
        assert status == 200
        status, made = await owner.call("POST", "/api/links")
        assert status == 201, made
    finally:
        await owner.close()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/static/app.js"),
        ("GET", "api/sessions"),
        ("GET", "/api/../static/app.js"),
        ("GET", "/api/./sessions"),
        ("GET", "http://127.0.0.1:1/api/sessions"),
        ("GET", "//evil.test/api/sessions"),
        ("GET", "/api/sessions#fragment"),
        ("BREW", "/api/sessions"),
        ("GET /api/sessions HTTP/1.1\r\nX:", "/api/sessions"),
    ],
)
async def test_what_is_not_an_api_request_is_refused(
    channel: grpc.aio.Channel, method: str, path: str
) -> None:
    stub = web_gateway_pb2_grpc.WebGatewayServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Fetch(web_gateway_pb2.WebRequest(method=method, path=path))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_a_header_that_would_split_the_request_is_refused(
    channel: grpc.aio.Channel,
) -> None:
    stub = web_gateway_pb2_grpc.WebGatewayServiceStub(channel)
    split = {"authorization": "Bearer x\r\nx-betcode-relayed: 0", "accept": "a\nb"}
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Fetch(
            web_gateway_pb2.WebRequest(method="GET", path="/api/sessions", headers=split)
        )
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    opening = web_gateway_pb2.WebSocketOpen(
        path="/api/sessions/x/stream?from=0", protocols=["betcode", "bearer.x\r\nx-a: b"]
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async for _ in stub.Socket(iter([web_gateway_pb2.WebSocketFrame(open=opening)])):
            pass
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_bodies_over_the_limits_are_refused(
    daemon: Daemon, channel: grpc.aio.Channel
) -> None:
    device = await sign_in(lan_url(daemon), owner_token(daemon))
    phone = GatewayClient(channel, device["credential"])
    # Over the daemon's payload limit (1 MiB here): the handler's 413, as on the LAN.
    answer = await phone.fetch("POST", "/api/sessions", "x" * (2 * MIB))
    assert answer.status == 413
    # Over the gateway's own limit: refused before any handler.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await phone.fetch("POST", "/api/sessions", "x" * (MAX_BODY_BYTES + 1))
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_socket_must_open_an_api_stream_with_a_credential(
    daemon: Daemon, channel: grpc.aio.Channel, workspace: Workspace
) -> None:
    stub = web_gateway_pb2_grpc.WebGatewayServiceStub(channel)
    for frames in (
        [],
        [web_gateway_pb2.WebSocketFrame(text="{}")],
        [web_gateway_pb2.WebSocketFrame(open=web_gateway_pb2.WebSocketOpen(path="/"))],
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in stub.Socket(iter(frames)):
                pass
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT

    device = await sign_in(lan_url(daemon), owner_token(daemon))
    phone = GatewayClient(channel, device["credential"], "web-phone")
    session_id = await phone.create_session(str(workspace.repo))
    path = f"/api/sessions/{session_id}/stream?from=0&client=web-x"
    # Refused at the handshake: closed with 4000 + the HTTP status.
    for protocols, code in ((["betcode"], 4401), (["betcode", "bearer.wrong"], 4401)):
        socket = GatewaySocket(stub, path, protocols, ())
        assert [message async for message in socket] == []
        assert socket.close_code == code
    socket = GatewaySocket(
        stub, "/api/sessions/nope/stream?from=0", ["betcode", f"bearer.{device['credential']}"], ()
    )
    assert [message async for message in socket] == []
    assert socket.close_code == 4404


async def test_the_stream_replays_takes_messages_and_closes_when_the_device_is_revoked(
    daemon: Daemon, channel: grpc.aio.Channel, workspace: Workspace
) -> None:
    device = await sign_in(lan_url(daemon), owner_token(daemon), "phone")
    phone = GatewayClient(channel, device["credential"], "web-phone")
    session_id = await phone.create_session(str(workspace.repo))
    stream = await phone.stream(session_id)
    await asyncio.wait_for(stream.caught_up.wait(), 30)
    await stream.say(PLAIN_PROMPT)
    await stream.until(lambda: _text(stream.events, "through the gateway"))
    await stream.until(lambda: stream.of_kind("turn_complete") or None)
    await stream.close()
    # A second stream replays the whole history.
    again = await phone.stream(session_id)
    await asyncio.wait_for(again.caught_up.wait(), 30)
    assert _text(again.events, "through the gateway")
    # (Events stored after the first stream closed come after: the session went idle.)
    assert again.sequences[: len(stream.sequences)] == stream.sequences
    assert again.sequences == list(range(1, len(again.sequences) + 1))

    # Revoked on the LAN: the gateway's stream is closed at once, with the LAN's code.
    owner = WebClient(lan_url(daemon), owner_token(daemon))
    try:
        status, _ = await owner.call("DELETE", f"/api/devices/{device['device_id']}")
        assert status == 200
    finally:
        await owner.close()
    await asyncio.wait_for(again.closed(), 5)
    assert again.socket.close_code == 4401
    assert (await phone.call("GET", "/api/sessions"))[0] == 401


async def test_without_a_lan_listener_or_a_relay_there_is_no_web_client(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    """(With a relay and no LAN listener it serves: tests/relay/test_relay_web_gateway.py.)"""
    daemon = Daemon(config_for(tmp_path, claude_bin, mock_api, workspace, lan=False))
    await daemon.start()
    try:
        assert daemon.web is None
        assert not daemon.config.web_gateway_socket.exists()
        async with grpc.aio.insecure_channel(f"unix:{daemon.config.socket_path}") as channel:
            stub = web_gateway_pb2_grpc.WebGatewayServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Fetch(web_gateway_pb2.WebRequest(method="GET", path="/api/sessions"))
            assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
    finally:
        await daemon.stop()


def _text(events: list[dict[str, object]], wanted: str) -> bool | None:
    return wanted in json.dumps(events) or None


async def test_more_streams_than_a_connection_pool_holds_all_open(
    daemon: Daemon, channel: grpc.aio.Channel, workspace: Workspace
) -> None:
    """Each Socket holds a connection to the web app for as long as it is open: a pool limit
    (aiohttp's default is 100) would leave the next page's stream waiting for ever."""
    device = await sign_in(lan_url(daemon), owner_token(daemon))
    phone = GatewayClient(channel, device["credential"], "web-phone")
    session_id = await phone.create_session(str(workspace.repo))
    streams = [await phone.stream(session_id) for _ in range(POOL_BEYOND)]
    try:
        for stream in streams:
            await asyncio.wait_for(stream.caught_up.wait(), 30)
    finally:
        for stream in streams:
            await stream.close()


@pytest.mark.parametrize(("sent", "closed_with"), [(4100, 4100), (1006, 1000), (0, 1000)])
async def test_a_client_close_ends_the_socket_with_a_code_a_peer_may_send(
    daemon: Daemon, channel: grpc.aio.Channel, workspace: Workspace, sent: int, closed_with: int
) -> None:
    """1006 says "closed without a close frame": never sent; a page's own codes pass."""
    device = await sign_in(lan_url(daemon), owner_token(daemon))
    phone = GatewayClient(channel, device["credential"], "web-phone")
    stream = await phone.stream(await phone.create_session(str(workspace.repo)))
    await asyncio.wait_for(stream.caught_up.wait(), 30)
    assert isinstance(stream.socket, GatewaySocket)
    await stream.socket.close(sent, "page closed")
    await asyncio.wait_for(stream.closed(), 10)
    assert stream.socket.close_code == closed_with
    assert await stream.socket.call.code() is grpc.StatusCode.OK


async def test_a_caller_that_leaves_detaches_its_page_from_the_session(
    daemon: Daemon, channel: grpc.aio.Channel, workspace: Workspace
) -> None:
    """The gRPC call cancelled (the phone lost the relay): the web app's stream ends with it,
    so the page no longer counts as attached (nor holds anything of the session)."""
    device = await sign_in(lan_url(daemon), owner_token(daemon))
    phone = GatewayClient(channel, device["credential"], "web-phone")
    stream = await phone.stream(await phone.create_session(str(workspace.repo)))
    await asyncio.wait_for(stream.caught_up.wait(), 30)

    def attached() -> set[str]:
        with sqlite3.connect(daemon.config.database_path) as db:
            return {row[0] for row in db.execute("SELECT client_id FROM connected_clients")}

    await until(lambda: "web-phone" in attached())
    assert isinstance(stream.socket, GatewaySocket)
    stream.socket.call.cancel()
    await until(lambda: "web-phone" not in attached())
