"""Web Push for a phone that reaches its machine through the relay, all of it real: `betcode
relay start --push-allow-loopback` in its own process (its own nats-server), a daemon
registered with it running the pinned real CLI against the mock model, and the harness's RFC
8030 push service. The phone signs in, then registers its subscription through the relay (a
sealed WebGatewayService call); a tool call waits with nobody at the session: the push comes
from the relay's process, not the daemon's, names the session and the tool, decrypts with the
phone's keys and carries the daemon's VAPID signature; nothing the relay has (its log, its
files) holds the conversation's text. The push service then answers 410: the daemon forgets
the subscription."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
from harness.daemon import daemon_config
from harness.environment import Workspace
from harness.push_service import PushService
from harness.relay import RelayProcess, bearer, register, register_machine
from harness.web import WebClient, sign_in
from harness.web_gateway import GatewayClient

from betcode.cli.relay_e2e import EncryptingChannel
from betcode.config.settings import DaemonSettings, HttpSettings, WebPushSettings, WebSettings
from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.push.notifications import POLL_SECONDS
from betcode.push.vapid import VapidKey
from betcode.remote.e2e import ClientSession, DaemonIdentity
from betcode.storage.push_subscriptions import PushSubscription, list_subscriptions
from betcode.tunnel.identity import MachineIdentity
from betcode.web.token import token_path

pytestmark = pytest.mark.real_cli

TOOL_SECRET = "6 * 4243"
PROMPT_SECRET = "relayed-push-prompt-5151"
TOOL_PROMPT = (
    f'SCN:tool_bash {{"command": "python3 -c \\"print({TOOL_SECRET})\\""}} {PROMPT_SECRET}'
)
MACHINE = "box"


@pytest.fixture
async def push_service() -> AsyncIterator[PushService]:
    service = await PushService().start()
    yield service
    await service.stop()


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[RelayProcess]:
    started = RelayProcess(tmp_path / "relay", extra_args=["--push-allow-loopback"])
    started.start()
    try:
        yield started
    finally:
        started.stop()


def relay_channel(relay: RelayProcess) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(root_certificates=relay.ca.read_bytes())
    return grpc.aio.secure_channel(relay.url.split("://", 1)[1], credentials)


async def test_an_approval_for_a_relayed_phone_is_pushed_by_the_relay_unreadable_to_it(
    tmp_path: Path,
    claude_bin: Path,
    workspace: Workspace,
    mock_api: MockAnthropic,
    push_service: PushService,
    relay: RelayProcess,
) -> None:
    async with relay_channel(relay) as channel:
        account = await register(channel, "alice")
        identity = MachineIdentity(tmp_path / "daemon" / "config" / "certs")
        await register_machine(channel, account, MACHINE, identity)
        settings = DaemonSettings(
            http=HttpSettings(listen="127.0.0.1:0"),
            web=WebSettings(push=WebPushSettings(allow_loopback_endpoints=True)),
        )
        config = replace(
            daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url)),
            settings=settings,
            relay_urls=(relay.tunnel_url,),
        )
        daemon = Daemon(config)
        await daemon.start()
        assert daemon.web is not None
        assert daemon.web.url is not None
        token = token_path(config.config_dir).read_text().strip()
        laptop = WebClient(daemon.web.url, token, "web-laptop")
        try:
            # The phone signed in once (a link), and from then on reaches the machine through
            # the relay only: its subscription is registered there.
            phone_device = await sign_in(daemon.web.url, token, "phone")
            sealed = EncryptingChannel(
                channel,
                ClientSession.sealed(DaemonIdentity.load_or_create(identity.e2e_key_file).public),
            )
            metadata = (*bearer(account.access), ("x-machine-id", MACHINE))
            phone = GatewayClient(sealed, phone_device["credential"], "web-phone", metadata)
            browser = push_service.subscribe()
            status, _ = await until_registered(phone, browser.json())
            assert status == 201
            [stored] = await daemon_subscriptions(daemon)
            assert stored.relayed

            session_id = await laptop.create_session(str(workspace.repo))
            stream = await laptop.stream(session_id)
            await stream.say(TOOL_PROMPT)
            request = await stream.wait_for("permission_request")
            await stream.close()  # nobody at the session: the request is pushed

            [push] = await push_service.wait_for(1, within_s=POLL_SECONDS + 30)
            assert push_service.refused == []
            assert push.payload["kind"] == "permission"
            assert push.payload["request_id"] == request["request_id"]
            assert push.payload["session_id"] == session_id
            assert push.payload["tool"] == "Bash"
            assert TOOL_SECRET in push.payload["action"]
            assert push.vapid_key == (
                VapidKey.load_or_create(config.config_dir).public_key_base64url()
            )
            # POSTed by the relay's process: the daemon (this process) never reached it.
            assert relay.process is not None
            assert push.sender_pid == relay.process.pid != os.getpid()
            assert TOOL_SECRET.encode() not in push.body

            # The push service has dropped the phone: the next push (the answer's) meets 410.
            push_service.gone.add(browser.endpoint)
            answer = await laptop.answer(request["request_id"], decision="allow_once")
            assert answer["outcome"] == "allowed"
            async with asyncio.timeout(POLL_SECONDS + 30):
                while await daemon_subscriptions(daemon):  # noqa: ASYNC110 - SQLite state
                    await asyncio.sleep(0.2)
            assert len(push_service.received) == 1
        finally:
            await laptop.close()
            await daemon.stop()
    relay.stop()
    relay_text = relay.log_path.read_bytes() + b"".join(
        path.read_bytes() for path in relay.root.rglob("*") if path.is_file()
    )
    for secret in (TOOL_SECRET, PROMPT_SECRET, str(6 * 4243)):
        assert secret.encode() not in relay_text


async def until_registered(phone: GatewayClient, subscription: object) -> tuple[int, Any]:
    """The machine's tunnel may still be opening: UNAVAILABLE until it is."""
    async with asyncio.timeout(30):
        while True:
            try:
                return await phone.call("POST", "/api/push/subscriptions", subscription)
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                await asyncio.sleep(0.2)


async def daemon_subscriptions(daemon: Daemon) -> list[PushSubscription]:
    assert daemon.core is not None
    return list(await daemon.core.reader.read(list_subscriptions))
