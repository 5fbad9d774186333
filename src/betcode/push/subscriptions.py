"""What a page registers: the browser's PushSubscription JSON (`endpoint`, `keys.p256dh`,
`keys.auth`), checked before it is stored. The endpoint is where the daemon (or the relay)
POSTs, so it must be https (the push service's own certificate is checked); plain http only
to 127.0.0.1, and only with `daemon.web.push.allow_loopback_endpoints`
(remote/web_push.py)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from betcode.remote import web_push
from betcode.storage import pending as pending_rows
from betcode.storage import push_subscriptions as rows
from betcode.storage.push_subscriptions import PushSubscription
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter

P256_POINT_BYTES = 65  # uncompressed: 0x04, x, y
AUTH_SECRET_BYTES = 16
# Every push goes to every subscription: a bound on the fan-out (and on what a page can store).
MAX_SUBSCRIPTIONS = 50


class SubscriptionRefused(ValueError):
    """The subscription cannot be used; the message says why."""


def check_endpoint(endpoint: Any, *, allow_loopback: bool) -> str:
    try:
        return web_push.check_endpoint(
            endpoint,
            allow_loopback=allow_loopback,
            loopback_switch="daemon.web.push.allow_loopback_endpoints",
        )
    except web_push.EndpointRefused as refused:
        raise SubscriptionRefused(str(refused)) from None


def parse_subscription(
    body: dict[str, Any],
    *,
    client_id: str,
    device_id: str,
    now: float,
    allow_loopback: bool,
    relayed: bool = False,
) -> PushSubscription:
    """`device_id`: the signed-in device registering it (pushed to only while signed in);
    `relayed`: it registers through the relay, and is pushed to through it."""
    endpoint = check_endpoint(body.get("endpoint"), allow_loopback=allow_loopback)
    keys = body.get("keys")
    if not isinstance(keys, dict):
        raise SubscriptionRefused("keys must hold p256dh and auth (the PushSubscription JSON)")
    p256dh = _base64url(keys.get("p256dh"), "keys.p256dh", P256_POINT_BYTES)
    if not p256dh.startswith(b"\x04"):
        raise SubscriptionRefused("keys.p256dh must be an uncompressed P-256 point")
    _base64url(keys.get("auth"), "keys.auth", AUTH_SECRET_BYTES)
    return PushSubscription(
        endpoint, keys["p256dh"], keys["auth"], client_id, now, device_id, relayed
    )


def _base64url(value: Any, name: str, size: int) -> bytes:
    if not isinstance(value, str):
        raise SubscriptionRefused(f"{name} must be a base64url string")
    try:
        data = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise SubscriptionRefused(f"{name} is not base64url") from None
    if len(data) != size:
        raise SubscriptionRefused(f"{name} must be {size} bytes, got {len(data)}")
    return data


class Subscriptions:
    """The stored subscriptions, and which requests were pushed: written through the daemon's
    one writer, read from the pool."""

    def __init__(self, writer: StoreWriter, reader: StoreReader) -> None:
        self._writer = writer
        self._reader = reader

    async def save(self, subscription: PushSubscription) -> None:
        """Refused (SubscriptionRefused) when MAX_SUBSCRIPTIONS others are stored."""
        if not await self._writer.call(
            lambda c: rows.save_subscription(c, subscription, MAX_SUBSCRIPTIONS)
        ):
            raise SubscriptionRefused(
                f"this daemon already has {MAX_SUBSCRIPTIONS} push subscriptions; remove one "
                "(DELETE /api/push/subscriptions) first"
            )

    async def delete(self, endpoint: str) -> bool:
        return await self._writer.call(lambda c: rows.delete_subscription(c, endpoint))

    async def all(self) -> list[PushSubscription]:
        return await self._reader.read(rows.list_subscriptions)

    async def mark_pushed(self, request_id: str) -> None:
        """The request was pushed (its notification id is its request id)."""
        await self._writer.call(lambda c: pending_rows.mark_pushed(c, request_id, request_id))
