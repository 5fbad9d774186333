"""Web Push through the relay (relay/push_delivery.py), from the daemon's push sender over its
real tunnel client to a relay in this event loop, and from the relay to the local RFC 8030 push
service of the harness (which checks the VAPID signature and decrypts with the browser's
keys). What the relay is handed is recorded: the payload's text is never in it. The relay
refuses plain http unless `--push-allow-loopback`, anything that is not an encrypted, signed
push message, callers that are not machines, and more than its per-user limit; a 410 from the
push service reaches the daemon, which forgets the subscription."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from harness.attention import WaitingRequests, waiting_row
from harness.push_service import PushService
from harness.relay import client_channel, register, register_machine, relay_in_process

from betcode.push.notifications import PushNotifications
from betcode.push.sender import PushSender, RelayDelivery
from betcode.push.subscriptions import Subscriptions, parse_subscription
from betcode.push.vapid import VapidKey
from betcode.relay.push_delivery import PushRelaySettings
from betcode.remote.web_push import PushNotPosted
from betcode.storage import StoreReader, StoreWriter, open_database
from betcode.storage.push_subscriptions import PushSubscription
from betcode.tunnel.client import Backoff, TunnelClient, TunnelSettings
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import push_relay_pb2, push_relay_pb2_grpc

SECRET = "rm -rf the-secret-build"
PAYLOAD = {"kind": "permission", "notification_id": "req-1", "tool": "Bash", "action": SECRET}


@dataclass
class Handed:
    endpoint: str
    body: bytes
    headers: dict[str, str]


@dataclass
class Rig:
    service: PushService
    tunnel: TunnelClient
    sender: PushSender
    subscriptions: Subscriptions
    key: VapidKey
    handed: list[Handed] = field(default_factory=list)  # what the relay was given
    running: asyncio.Task[None] | None = None  # the tunnel, while it runs

    async def connect(self) -> None:
        self.running = asyncio.create_task(self.tunnel.run())
        await asyncio.wait_for(self.tunnel.connected.wait(), 30)

    async def disconnect(self) -> None:
        if self.running is not None:
            self.running.cancel()
            await asyncio.gather(self.running, return_exceptions=True)
            self.running = None

    async def subscribe(self, relayed: bool = True) -> PushSubscription:
        browser = self.service.subscribe()
        subscription = parse_subscription(
            browser.json(),
            client_id="web-phone",
            device_id="dev-phone",
            now=0.0,
            allow_loopback=True,
            relayed=relayed,
        )
        await self.subscriptions.save(subscription)
        return subscription


@contextlib.asynccontextmanager
async def relay_rig(tmp_path: Path, settings: PushRelaySettings) -> AsyncIterator[Rig]:
    """A relay with these push settings, a machine registered and its tunnel open, and the
    daemon's push sender delivering relayed subscriptions' messages through it."""
    service = await PushService().start()
    database = open_database(tmp_path / "daemon.db")
    writer, reader = StoreWriter(database), StoreReader(database)
    try:
        async with relay_in_process(tmp_path / "relay", push=settings) as relay:
            async with client_channel(relay) as channel:
                account = await register(channel, "alice")
                identity = MachineIdentity(tmp_path / "certs")
                await register_machine(channel, account, "box", identity)
            tunnel = TunnelClient(
                TunnelSettings(
                    relay_urls=[f"https://127.0.0.1:{relay.tunnel_port}"],
                    identity=identity,
                    local_target=f"unix:{tmp_path / 'no-daemon.sock'}",
                    backoff=Backoff(initial=0.1, maximum=0.5),
                )
            )
            handed: list[Handed] = []

            async def through_relay(endpoint: str, body: bytes, headers: Mapping[str, str]) -> int:
                handed.append(Handed(endpoint, body, dict(headers)))
                return await tunnel.deliver_push(endpoint, body, headers)

            key = VapidKey.load_or_create(tmp_path / "config")
            subscriptions = Subscriptions(writer, reader)
            sender = PushSender(
                key,
                subscriptions.delete,
                "mailto:alice@example.com",
                RelayDelivery(through_relay, identity.machine_id()),
            )
            rig = Rig(service, tunnel, sender, subscriptions, key, handed)
            try:
                await rig.connect()
                yield rig
            finally:
                await rig.disconnect()
                await sender.close()
    finally:
        await service.stop()
        await writer.close()
        reader.close()


async def test_a_relayed_push_is_posted_by_the_relay_and_read_only_by_the_browser(
    tmp_path: Path,
) -> None:
    async with relay_rig(tmp_path, PushRelaySettings(allow_loopback=True)) as rig:
        subscription = await rig.subscribe()
        assert await rig.sender.send(subscription, PAYLOAD)
        [push] = await rig.service.wait_for(1)
        assert rig.service.refused == []
        # The browser decrypts it with its keys; the VAPID signature is the daemon's. A relayed
        # push names its machine (the phone opens and answers through the relay by it).
        machine_id = MachineIdentity(tmp_path / "certs").machine_id()
        assert push.payload == {**PAYLOAD, "machine_id": machine_id}
        assert push.vapid_key == rig.key.public_key_base64url()
        assert push.claims["sub"] == "mailto:alice@example.com"
        assert push.claims["aud"] == rig.service.url
        # The relay was handed ciphertext and the Web Push headers only, and sent just that.
        [handed] = rig.handed
        assert handed.endpoint == subscription.endpoint
        assert set(handed.headers) == {
            "authorization",
            "content-encoding",
            "ttl",
            "urgency",
            "topic",
        }
        for name, value in handed.headers.items():
            assert push.headers[name] == value
        for text in (SECRET, "the-secret-build", "Bash", "req-1"):
            assert text.encode() not in handed.body
            assert text not in json.dumps(handed.headers)
        # A subscription made on the LAN is still pushed to directly, not through the relay.
        direct = await rig.subscribe(relayed=False)
        assert await rig.sender.send(direct, PAYLOAD)
        pushes = await rig.service.wait_for(2)
        assert pushes[1].payload == PAYLOAD  # no machine id: the LAN page has one daemon
        assert len(rig.handed) == 1


async def test_a_subscription_gone_at_the_push_service_is_forgotten_through_the_relay(
    tmp_path: Path,
) -> None:
    async with relay_rig(tmp_path, PushRelaySettings(allow_loopback=True)) as rig:
        gone = await rig.subscribe()
        kept = await rig.subscribe()
        rig.service.gone.add(gone.endpoint)
        assert not await rig.sender.send(gone, PAYLOAD)
        assert await rig.sender.send(kept, PAYLOAD)
        assert [s.endpoint for s in await rig.subscriptions.all()] == [kept.endpoint]
        assert await rig.tunnel.deliver_push(*handed_again(rig, 0)) == 410


def handed_again(rig: Rig, index: int) -> tuple[str, bytes, dict[str, str]]:
    handed = rig.handed[index]
    return handed.endpoint, handed.body, handed.headers


async def test_without_push_allow_loopback_the_relay_refuses_a_plain_http_endpoint(
    tmp_path: Path,
) -> None:
    async with relay_rig(tmp_path, PushRelaySettings()) as rig:
        subscription = await rig.subscribe()
        assert not await rig.sender.send(subscription, PAYLOAD)
        with pytest.raises(PushNotPosted, match="--push-allow-loopback"):
            await rig.tunnel.deliver_push(*handed_again(rig, 0))
        await asyncio.sleep(0.5)
        assert rig.service.received == []
        # Kept: the relay's refusal is not the push service's "gone".
        assert [s.endpoint for s in await rig.subscriptions.all()] == [subscription.endpoint]


async def test_the_relay_posts_only_encrypted_signed_messages_for_machines(
    tmp_path: Path,
) -> None:
    async with relay_rig(tmp_path, PushRelaySettings(allow_loopback=True)) as rig:
        subscription = await rig.subscribe()
        body, headers = rig.sender.message(subscription, PAYLOAD)
        refusals = {
            "content-encoding": (body, {**headers, "content-encoding": "identity"}),
            "VAPID": (body, {k: v for k, v in headers.items() if k != "authorization"}),
            "ttl": (body, {k: v for k, v in headers.items() if k != "ttl"}),
            "more than 8192": (b"x" * 9000, headers),
        }
        for why, (sent_body, sent_headers) in refusals.items():
            with pytest.raises(PushNotPosted, match=why):
                await rig.tunnel.deliver_push(subscription.endpoint, sent_body, sent_headers)
        for endpoint in ("http://push.example/a", "ftp://127.0.0.1:1/a"):
            with pytest.raises(PushNotPosted, match="https"):
                await rig.tunnel.deliver_push(endpoint, body, headers)
        # Headers beyond Web Push's are not passed on.
        extra = {**headers, "cookie": "session=1", "x-forwarded-for": "10.0.0.1"}
        assert await rig.tunnel.deliver_push(subscription.endpoint, body, extra) == 201
        [push] = await rig.service.wait_for(1)
        assert "cookie" not in push.headers
        assert "x-forwarded-for" not in push.headers


async def test_only_a_registered_machine_may_ask_the_relay_to_push(tmp_path: Path) -> None:
    async with (
        relay_in_process(tmp_path / "relay", push=PushRelaySettings(allow_loopback=True)) as relay,
        client_channel(relay) as channel,
    ):
        account = await register(channel, "alice")
        stub = push_relay_pb2_grpc.PushRelayServiceStub(channel)
        delivery = push_relay_pb2.PushDelivery(endpoint="https://push.example/a", body=b"x")
        for metadata in ((), (("authorization", f"Bearer {account.access}"),)):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Deliver(delivery, metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_the_relays_per_user_limit_holds_against_a_flooding_daemon(
    tmp_path: Path,
) -> None:
    settings = PushRelaySettings(allow_loopback=True, per_user_per_hour=3)
    async with relay_rig(tmp_path, settings) as rig:
        subscription = await rig.subscribe()
        body, headers = rig.sender.message(subscription, PAYLOAD)
        statuses: list[Any] = []
        for _ in range(6):
            try:
                statuses.append(await rig.tunnel.deliver_push(subscription.endpoint, body, headers))
            except PushNotPosted as refused:
                statuses.append(str(refused))
        assert statuses[:3] == [201, 201, 201]
        assert all("push limit for this user is reached" in str(s) for s in statuses[3:])
        assert len(await rig.service.wait_for(3)) == 3
        await asyncio.sleep(0.3)
        assert len(rig.service.received) == 3
        # The daemon's sender logs it and goes on; the subscription is kept.
        assert not await rig.sender.send(subscription, PAYLOAD)
        assert len(await rig.subscriptions.all()) == 1


async def test_a_waiting_request_is_pushed_through_the_relay_once_it_is_back(
    tmp_path: Path,
) -> None:
    async with relay_rig(tmp_path, PushRelaySettings(allow_loopback=True)) as rig:
        relayed = await rig.subscribe()
        direct = await rig.subscribe(relayed=False)
        requests = WaitingRequests()
        notifications = PushNotifications(
            requests, rig.subscriptions, rig.sender, signed_in=lambda _device: True
        )
        await rig.disconnect()  # the tunnel is down: the relay cannot be reached
        first = waiting_row("req-1", "s1", {"command": SECRET})
        second = waiting_row("req-2", "s1", {"command": "make"})
        requests.pending = [first, second]
        await notifications.round()
        await notifications.round()
        pushes = await rig.service.wait_for(2)
        assert [(p.endpoint, p.payload["request_id"]) for p in pushes] == [
            (direct.endpoint, "req-1"),
            (direct.endpoint, "req-2"),
        ]
        # req-2 is answered while the relay is away: its push is not sent late.
        requests.pending = [first]
        await notifications.round()
        resolved = (await rig.service.wait_for(3))[2]
        assert (resolved.endpoint, resolved.payload["kind"]) == (direct.endpoint, "resolved")

        await rig.connect()
        await notifications.round()
        late = (await rig.service.wait_for(4))[3]
        assert (late.endpoint, late.payload["request_id"]) == (relayed.endpoint, "req-1")
        assert late.payload["kind"] == "permission"
        await notifications.round()
        await asyncio.sleep(0.3)
        assert len(rig.service.received) == 4  # once
