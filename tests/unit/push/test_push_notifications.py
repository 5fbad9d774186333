"""Web Push from the daemon's side, against the local RFC 8030 push service of the harness:
what is pushed (decrypted with the subscription's keys, signed with the daemon's VAPID key),
when (not while a client holds the input lock), how often (dedup, rate limits), and a
subscription its push service dropped being forgotten. Real SQLite, real HTTP on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.attention import WaitingRequests, waiting_row, watched
from harness.push_service import PushService

from betcode.config.errors import ConfigError
from betcode.config.resolve import load_daemon_settings
from betcode.config.settings import WebPushSettings
from betcode.push.notifications import PushNotifications
from betcode.push.sender import PushSender, topic_of
from betcode.push.subscriptions import (
    MAX_SUBSCRIPTIONS,
    SubscriptionRefused,
    Subscriptions,
    parse_subscription,
)
from betcode.push.vapid import KEY_FILE, VapidKey
from betcode.storage import StoreReader, StoreWriter, open_database
from betcode.storage import pending as pending_rows
from betcode.storage.pending import PendingPermission
from betcode.storage.push_subscriptions import PushSubscription
from betcode.storage.sessions import create_session


def waiting(request_id: str, session_id: str, command: str = "rm -rf build") -> PendingPermission:
    return waiting_row(request_id, session_id, {"command": command})


def registered(
    body: dict[str, Any], device_id: str = "dev-phone", allow_loopback: bool = True
) -> PushSubscription:
    """What the daemon stores for a page of `device_id` registering `body`."""
    return parse_subscription(
        body, client_id="web-x", device_id=device_id, now=0.0, allow_loopback=allow_loopback
    )


class Stored:
    """The permission bridge's reads, from the store itself."""

    def __init__(self, reader: StoreReader) -> None:
        self._reader = reader
        self.forwarded_listeners: list[Callable[[str], None]] = []

    async def list_pending(self, session_id: str | None) -> list[PendingPermission]:
        return await self._reader.read(pending_rows.list_unanswered)

    async def find_request(self, request_id: str) -> PendingPermission | None:
        return await self._reader.read(lambda c: pending_rows.get_pending(c, request_id))


@dataclass
class Setup:
    service: PushService
    key: VapidKey
    subscriptions: Subscriptions
    requests: WaitingRequests
    notifications: PushNotifications
    now: list[float]
    writer: StoreWriter
    reader: StoreReader
    sender: PushSender
    signed_out: set[str]  # devices revoked (or signed out by a token rotation)

    async def subscribe(self, device_id: str = "dev-phone") -> str:
        browser = self.service.subscribe()
        subscription = registered(browser.json(), device_id)
        await self.subscriptions.save(subscription)
        return browser.endpoint


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    service = await PushService().start()
    database = open_database(tmp_path / "daemon.db")
    writer, reader = StoreWriter(database), StoreReader(database)
    key = VapidKey.load_or_create(tmp_path / "config")
    subscriptions = Subscriptions(writer, reader)
    sender = PushSender(key, subscriptions.delete, "mailto:alice@example.com")
    requests = WaitingRequests()
    now = [1_000_000.0]
    signed_out: set[str] = set()
    notifications = PushNotifications(
        requests,
        subscriptions,
        sender,
        signed_in=lambda device_id: device_id not in signed_out,
        clock=lambda: now[0],
    )
    try:
        yield Setup(
            service,
            key,
            subscriptions,
            requests,
            notifications,
            now,
            writer,
            reader,
            sender,
            signed_out,
        )
    finally:
        await sender.close()
        await service.stop()
        await writer.close()
        reader.close()


async def test_a_waiting_request_is_pushed_encrypted_to_the_subscription_and_signed(
    setup: Setup,
) -> None:
    endpoint = await setup.subscribe()
    shop = watched("session-shop", "/home/alice/shop")
    setup.notifications.watch(shop)
    setup.requests.pending = [waiting("req-1", "session-shop", "rm -rf build")]
    await setup.notifications.round()
    [push] = await setup.service.wait_for(1)
    assert setup.service.refused == []
    assert push.endpoint == endpoint
    # Decrypted with the browser's private key and auth secret: it names the tool and call.
    assert push.payload["kind"] == "permission"
    assert push.payload["request_id"] == "req-1"
    assert push.payload["session_id"] == "session-shop"
    assert push.payload["session"] == "shop"
    assert push.payload["tool"] == "Bash"
    assert push.payload["action"] == "rm -rf build"
    assert push.payload["title"] == "Bash waits for your approval"
    # Signed by the daemon's VAPID key, for this push service, with a contact.
    assert push.vapid_key == setup.key.public_key_base64url()
    assert push.claims["aud"] == setup.service.url
    assert push.claims["sub"] == "mailto:alice@example.com"  # daemon.web.push.contact
    assert push.headers["urgency"] == "high"
    assert int(push.headers["ttl"]) > 0


async def test_secrets_in_the_call_are_cut_out_of_the_push(setup: Setup) -> None:
    await setup.subscribe()
    setup.requests.pending = [
        waiting("req-1", "s", "curl -H 'Authorization: Bearer sk-ant-abcdefghijklmnop' x")
    ]
    await setup.notifications.round()
    [push] = await setup.service.wait_for(1)
    assert "sk-ant" not in json.dumps(push.payload)
    assert "[REDACTED]" in push.payload["action"]


async def test_a_waiting_question_is_pushed_as_a_question(setup: Setup) -> None:
    await setup.subscribe()
    question = dataclasses.replace(
        waiting_row("q-1", "s1", {"questions": [{"question": "Which?"}]}, "AskUserQuestion"),
        is_question=True,
    )
    setup.requests.pending = [question]
    await setup.notifications.round()
    [push] = await setup.service.wait_for(1)
    assert push.payload["kind"] == "question"
    assert push.payload["request_id"] == "q-1"
    assert push.payload["title"] == "Claude asks you a question"


async def test_nothing_is_pushed_while_a_client_holds_the_input_lock(setup: Setup) -> None:
    await setup.subscribe()
    shop = watched("session-shop", "/home/alice/shop")
    setup.notifications.watch(shop)
    assert shop.lock.attach("web-laptop")  # someone is at the session
    setup.requests.pending = [waiting("req-1", "session-shop")]
    shop.end_turn(ok=True)
    for _ in range(3):
        await setup.notifications.round()
    assert setup.service.received == []
    shop.lock.detach("web-laptop")  # gone: the request still waits, so it is pushed now
    await setup.notifications.round()
    await setup.notifications.round()
    [push] = await setup.service.wait_for(1)
    assert push.payload["request_id"] == "req-1"
    assert len(setup.service.received) == 1  # the turn end while held is not pushed later


async def test_turn_ends_and_failures_are_pushed_without_conversation_text(setup: Setup) -> None:
    await setup.subscribe()
    shop = watched("session-shop", "/home/alice/shop")
    setup.notifications.watch(shop)
    shop.end_turn(ok=True)
    shop.end_turn(ok=False)
    await setup.notifications.round()
    pushes = await setup.service.wait_for(2)
    assert [push.payload["kind"] for push in pushes] == ["turn_finished", "error"]
    assert all("SECRET" not in json.dumps(push.payload) for push in pushes)


async def test_each_request_once_and_the_request_limits_hold(setup: Setup) -> None:
    """Every request stays waiting here (one that stops waiting is pushed as resolved)."""
    await setup.subscribe()
    pending = setup.requests.pending
    pending.append(waiting("req-1", "s1"))
    for _ in range(3):
        await setup.notifications.round()
    assert len(await setup.service.wait_for(1)) == 1
    # 20 an hour per session: of 24 more requests in s1, 19 are pushed (20 in all).
    pending += [waiting(f"req-{n}", "s1") for n in range(2, 26)]
    await setup.notifications.round()
    assert [p.payload["request_id"] for p in setup.service.received] == [
        f"req-{n}" for n in range(1, 21)
    ]
    # 100 a day for the daemon: four more sessions fill it, a sixth gets nothing.
    pending += [waiting(f"{s}-{n}", s) for s in ("s2", "s3", "s4", "s5", "s6") for n in range(20)]
    await setup.notifications.round()
    assert len(setup.service.received) == 100
    assert not any(p.payload["session_id"] == "s6" for p in setup.service.received)
    # An hour later s1 may have 20 more, but the day's 100 are spent.
    setup.now[0] += 3601
    pending.append(waiting("later", "s1"))
    await setup.notifications.round()
    assert len(setup.service.received) == 100
    setup.now[0] += 86_400
    await setup.notifications.round()
    assert len(setup.service.received) == 100  # "later" was counted out, not kept for later
    pending.append(waiting("next-day", "s1"))
    await setup.notifications.round()
    await setup.service.wait_for(101)
    assert setup.service.received[-1].payload["request_id"] == "next-day"


async def test_turn_ends_have_a_budget_of_their_own_and_never_starve_requests(
    setup: Setup,
) -> None:
    await setup.subscribe()
    sessions = [watched(f"s{n}", f"/home/alice/repo{n}") for n in range(5)]
    for session in sessions:
        setup.notifications.watch(session)
    # 6 turn ends in each of 5 sessions: 5 an hour per session, then 20 a day in all.
    for _ in range(6):
        for session in sessions:
            session.end_turn(ok=True)
    await setup.notifications.round()
    ends = await setup.service.wait_for(20)
    assert {p.payload["kind"] for p in ends} == {"turn_finished"}
    sessions[0].end_turn(ok=False)
    await setup.notifications.round()
    assert len(setup.service.received) == 20  # a failure counts in the spent budget too
    # The turn ends' budget is spent; what waits for an answer is pushed all the same.
    setup.requests.pending = [waiting("req-1", "s0"), waiting("req-2", "s4")]
    await setup.notifications.round()
    pushes = await setup.service.wait_for(22)
    assert [p.payload["request_id"] for p in pushes[20:]] == ["req-1", "req-2"]
    # A day later turn ends are pushed again.
    setup.now[0] += 86_401
    sessions[1].end_turn(ok=True)
    await setup.notifications.round()
    assert (await setup.service.wait_for(23))[-1].payload["kind"] == "turn_finished"


async def test_an_answered_request_is_pushed_again_as_resolved_once(setup: Setup) -> None:
    await setup.subscribe()
    request = waiting("req-1", "s1")
    setup.requests.pending = [request]
    await setup.notifications.round()
    await setup.service.wait_for(1)
    # Answered by another client: no longer waiting, stored with its decision.
    setup.requests.pending = []
    setup.requests.answered["req-1"] = dataclasses.replace(
        request, response_received=True, response_decision="deny"
    )
    await setup.notifications.round()
    await setup.notifications.round()
    first, resolved = await setup.service.wait_for(2)
    assert len(setup.service.received) == 2
    assert resolved.payload["kind"] == "resolved"
    assert resolved.payload["notification_id"] == first.payload["notification_id"] == "req-1"
    assert resolved.payload["outcome"] == "denied"
    assert resolved.payload["title"] == "Bash: denied"
    # One Topic: a push service still holding the request's message replaces it by this one.
    assert resolved.headers["topic"] == first.headers["topic"] == topic_of("req-1")
    assert len(topic_of("req-1")) == 32
    assert "req-1" not in first.headers["topic"]


async def test_a_restarted_daemon_does_not_push_a_request_again_but_its_resolution(
    setup: Setup,
) -> None:
    await setup.subscribe()

    def store(conn: sqlite3.Connection) -> None:
        create_session(conn, session_id="s1", model="m", working_directory="/w", now=0.0)
        pending_rows.insert_pending(
            conn,
            request_id="req-1",
            session_id="s1",
            tool_name="Bash",
            input_json='{"command": "make"}',
            dialect="stream_json",
            received_at=0.0,
            expires_at=1e12,
        )

    await setup.writer.call(store)
    before = PushNotifications(
        Stored(setup.reader), setup.subscriptions, setup.sender, signed_in=lambda _: True
    )
    await before.round()
    await setup.service.wait_for(1)
    # The daemon restarts: a notifier with nothing in memory, on the same store.
    after = PushNotifications(
        Stored(setup.reader), setup.subscriptions, setup.sender, signed_in=lambda _: True
    )
    await after.round()
    await after.round()
    assert len(setup.service.received) == 1
    await setup.writer.call(
        lambda c: pending_rows.answer(c, "req-1", decision="allow_once", payload="{}", now=1.0)
    )
    await after.round()
    first, resolved = await setup.service.wait_for(2)
    assert (first.payload["kind"], resolved.payload["kind"]) == ("permission", "resolved")
    assert resolved.payload["outcome"] == "allowed"


async def test_a_device_signed_out_is_told_nothing(setup: Setup) -> None:
    phone = await setup.subscribe("dev-phone")
    tablet = await setup.subscribe("dev-tablet")
    setup.signed_out.add("dev-tablet")  # revoked
    setup.requests.pending = [waiting("req-1", "s1")]
    await setup.notifications.round()
    [push] = await setup.service.wait_for(1)
    assert push.endpoint == phone
    assert tablet not in {p.endpoint for p in setup.service.received}


async def test_a_subscription_its_push_service_dropped_is_forgotten(setup: Setup) -> None:
    gone = await setup.subscribe()
    kept = await setup.subscribe()
    setup.service.gone.add(gone)
    setup.requests.pending = [waiting("req-1", "s1")]
    await setup.notifications.round()
    [push] = await setup.service.wait_for(1)
    assert push.endpoint == kept
    assert [s.endpoint for s in await setup.subscriptions.all()] == [kept]


async def test_subscriptions_are_bounded_and_one_registered_again_is_replaced(
    setup: Setup,
) -> None:
    endpoints = [await setup.subscribe() for _ in range(MAX_SUBSCRIPTIONS)]
    browser = setup.service.subscribe()
    extra = registered(browser.json())
    with pytest.raises(SubscriptionRefused, match="remove one"):
        await setup.subscriptions.save(extra)
    # The same endpoint again (new keys) is not one more.
    again = dataclasses.replace(
        registered(browser.json()),
        endpoint=endpoints[0],
    )
    await setup.subscriptions.save(again)
    stored = {s.endpoint: s for s in await setup.subscriptions.all()}
    assert sorted(stored) == sorted(endpoints)
    assert stored[endpoints[0]].p256dh == again.p256dh
    await setup.subscriptions.delete(endpoints[1])
    await setup.subscriptions.save(extra)
    assert len(await setup.subscriptions.all()) == MAX_SUBSCRIPTIONS


def test_the_vapid_key_is_made_once_owner_only(tmp_path: Path) -> None:
    first = VapidKey.load_or_create(tmp_path)
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert VapidKey.load_or_create(tmp_path).public_key_base64url() == (
        first.public_key_base64url()
    )


def test_an_endpoint_must_be_https_or_an_admitted_loopback_one() -> None:
    service = PushService()
    service.url = "http://127.0.0.1:9"
    keys = service.subscribe().json()["keys"]

    def parse(endpoint: str, allow_loopback: bool = False) -> str:
        body = {"endpoint": endpoint, "keys": keys}
        return registered(body, allow_loopback=allow_loopback).endpoint

    assert parse("https://push.example/abc") == "https://push.example/abc"
    with pytest.raises(SubscriptionRefused, match="allow_loopback_endpoints"):
        parse("http://127.0.0.1:9/push/a")
    assert parse("http://127.0.0.1:9/push/a", allow_loopback=True) == "http://127.0.0.1:9/push/a"
    for refused in ("http://push.example/a", "http://10.0.0.1:9/a", "ftp://x/", "", "https://"):
        with pytest.raises(SubscriptionRefused):
            parse(refused, allow_loopback=True)
    with pytest.raises(SubscriptionRefused, match="p256dh"):
        registered({"endpoint": "https://p.example/a", "keys": {**keys, "p256dh": "AAAA"}})
    with pytest.raises(SubscriptionRefused, match="auth"):
        registered({"endpoint": "https://p.example/a", "keys": {"p256dh": keys["p256dh"]}})


@pytest.mark.parametrize(
    ("contact", "admitted"),
    [
        ("mailto:alice@example.com", True),
        ("https://example.com/contact", True),
        ("alice@example.com", False),
        ("mailto:", False),
        ("mailto:alice", False),
        ("mailto:a b@example.com", False),
        ("http://example.com/contact", False),
        ("https://", False),
        ("", False),
    ],
)
def test_the_vapid_contact_is_a_mailto_or_https_url(contact: str, admitted: bool) -> None:
    if admitted:
        assert WebPushSettings(contact=contact).contact == contact
    else:
        with pytest.raises(ValueError, match="must be a mailto: address"):
            WebPushSettings(contact=contact)


def test_a_bad_vapid_contact_in_the_settings_file_is_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(
        json.dumps({"daemon": {"web": {"push": {"contact": "betcode@localhost"}}}})
    )
    with pytest.raises(ConfigError, match=r"daemon\.web\.push\.contact: .* mailto:"):
        load_daemon_settings(tmp_path, environ={})
