"""Web Push through the running daemon, on the real CLI and the mock model: the page's
registration endpoints, and a tool call waiting for approval pushed to a local RFC 8030 push
service (harness.push_service) once nobody is at the session, then answered the way the
notification's action answers it (first answer wins)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from harness.daemon import daemon_config
from harness.environment import Workspace
from harness.push_service import PushService
from harness.web import WebClient, sign_in

from betcode.config.settings import DaemonSettings, HttpSettings, WebPushSettings, WebSettings
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.push.notifications import POLL_SECONDS
from betcode.push.vapid import VapidKey
from betcode.web.token import token_path

TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'


async def start_daemon(
    root: Path, claude_bin: Path, workspace: Workspace, mock_api: MockAnthropic, loopback: bool
) -> Daemon:
    settings = DaemonSettings(
        http=HttpSettings(listen="127.0.0.1:0"),
        web=WebSettings(push=WebPushSettings(allow_loopback_endpoints=loopback)),
    )
    config = daemon_config(root, claude_bin, workspace.env(mock_api.base_url))
    daemon = Daemon(replace(config, settings=settings))
    await daemon.start()
    return daemon


def page(daemon: Daemon, client_id: str) -> WebClient:
    assert daemon.web is not None
    assert daemon.web.url is not None
    token = token_path(daemon.config.config_dir).read_text().strip()
    return WebClient(daemon.web.url, token, client_id)


async def device(daemon: Daemon, name: str, client_id: str) -> WebClient:
    """A browser signed in as a device of its own (a one-time link exchanged)."""
    assert daemon.web is not None
    assert daemon.web.url is not None
    token = token_path(daemon.config.config_dir).read_text().strip()
    signed_in = await sign_in(daemon.web.url, token, name)
    return WebClient(daemon.web.url, signed_in["credential"], client_id)


@pytest.fixture
async def push_service() -> AsyncIterator[PushService]:
    service = await PushService().start()
    yield service
    await service.stop()


async def test_a_plain_http_push_service_is_refused_unless_the_setting_admits_it(
    tmp_path: Path,
    claude_bin: Path,
    workspace: Workspace,
    mock_api: MockAnthropic,
    push_service: PushService,
) -> None:
    daemon = await start_daemon(tmp_path / "d", claude_bin, workspace, mock_api, loopback=False)
    web = page(daemon, "web-phone")
    try:
        status, body = await web.call("GET", "/api/push/vapid-public-key")
        assert status == 200
        assert body["public_key"] == (
            VapidKey.load_or_create(daemon.config.config_dir).public_key_base64url()
        )
        browser = push_service.subscribe()
        status, body = await web.call("POST", "/api/push/subscriptions", browser.json())
        assert status == 400
        assert body["error"]["code"] == "INVALID_REQUEST"
        assert "allow_loopback_endpoints" in body["error"]["message"]
        status, body = await web.call("POST", "/api/push/subscriptions", {"endpoint": 1})
        assert status == 400
        https = {**browser.json(), "endpoint": "https://push.example/sub/1"}
        status, body = await web.call("POST", "/api/push/subscriptions", https)
        assert status == 201
        removed = {"endpoint": https["endpoint"]}
        assert await web.call("DELETE", "/api/push/subscriptions", removed) == (
            200,
            {"removed": True},
        )
        assert await web.call("DELETE", "/api/push/subscriptions", removed) == (
            200,
            {"removed": False},
        )
    finally:
        await web.close()
        await daemon.stop()


@pytest.mark.real_cli
async def test_an_approval_waiting_is_pushed_and_answered_from_the_notification(
    tmp_path: Path,
    claude_bin: Path,
    workspace: Workspace,
    mock_api: MockAnthropic,
    push_service: PushService,
) -> None:
    daemon = await start_daemon(tmp_path / "d", claude_bin, workspace, mock_api, loopback=True)
    owner = page(daemon, "web-owner")
    laptop = page(daemon, "web-laptop")
    phone = await device(daemon, "phone", "web-phone")
    tablet = await device(daemon, "tablet", "web-tablet")
    try:
        browser = push_service.subscribe()
        status, _ = await phone.call("POST", "/api/push/subscriptions", browser.json())
        assert status == 201
        # The tablet subscribes too, then is revoked: it is told nothing more.
        status, _ = await tablet.call(
            "POST", "/api/push/subscriptions", push_service.subscribe().json()
        )
        assert status == 201
        status, devices = await owner.call("GET", "/api/devices")
        [tablet_id] = [d["device_id"] for d in devices["devices"] if d["name"] == "tablet"]
        assert (await owner.call("DELETE", f"/api/devices/{tablet_id}"))[0] == 200
        session_id = await laptop.create_session(str(workspace.repo))
        stream = await laptop.stream(session_id)
        await stream.say(TOOL_PROMPT)
        request = await stream.wait_for("permission_request")
        # The laptop holds the input lock: someone is at the session, nothing is pushed.
        await asyncio.sleep(POLL_SECONDS + 1)
        assert push_service.received == []
        await stream.close()  # the laptop leaves; the request still waits

        [push] = await push_service.wait_for(1, within_s=POLL_SECONDS + 20)
        assert push_service.refused == []
        assert push.payload["kind"] == "permission"
        assert push.payload["request_id"] == request["request_id"]
        assert push.payload["session_id"] == session_id
        assert push.payload["tool"] == "Bash"
        assert "print(6 * 7)" in push.payload["action"]
        status, key = await phone.call("GET", "/api/push/vapid-public-key")
        assert push.vapid_key == key["public_key"]
        assert push.claims["aud"] == push_service.url

        # The notification's "Allow once", as the service worker sends it: the page's own
        # answer endpoint with the device's credential and the page's origin.
        assert daemon.web is not None
        status, answer = await phone.call(
            "POST",
            f"/api/permissions/{push.payload['request_id']}",
            {"decision": "allow_once"},
        )
        assert (status, answer) == (
            200,
            {"accepted": True, "duplicate": False, "outcome": "allowed"},
        )
        # A later "Deny" from the laptop finds it answered: first answer wins.
        late = await laptop.answer(request["request_id"], decision="deny")
        assert late["duplicate"] is True
        assert late["outcome"] == "allowed"

        # The request is pushed again as resolved (every device's notification says so), and
        # the turn ends with nobody at the session: pushed too.
        pushes = await push_service.wait_for(3, within_s=60)
        later = {p.payload["kind"]: p.payload for p in pushes[1:]}
        assert set(later) == {"resolved", "turn_finished"}
        assert later["resolved"]["notification_id"] == request["request_id"]
        assert later["resolved"]["title"] == "Bash: allowed"
        replay = await laptop.stream(session_id)
        await asyncio.wait_for(replay.caught_up.wait(), 30)
        results = replay.of_kind("tool_call_result")
        assert len(results) == 1  # the tool ran exactly once
        assert "42" in results[0]["output"]
        resolved = replay.of_kind("permission_resolved")
        assert [r["decided_by_client_id"] for r in resolved] == ["web-phone"]
        await replay.close()
        assert all("multiply" not in json.dumps(p.payload) for p in pushes)
        assert {p.endpoint for p in push_service.received} == {browser.endpoint}
    finally:
        for client in (owner, laptop, phone, tablet):
            await client.close()
        await daemon.stop()
