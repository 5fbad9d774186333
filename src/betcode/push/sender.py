"""One Web Push message to one subscription: the JSON payload encrypted to the subscription's
keys (RFC 8291, aes128gcm, by pywebpush) and a VAPID header signed with the daemon's key
(RFC 8292, py_vapid), here on the daemon; then POSTed to the endpoint (RFC 8030), by the
daemon itself, or for a subscription registered through the relay by the relay (`relay`, the
tunnel's PushRelayService call), which is handed only the ciphertext and the headers. A push
service answering 404 or 410 has dropped the subscription: its row is deleted. Other failures
are logged, never raised (but the relay out of reach, for the notifier to try again): a push is
a courtesy, the request itself waits in SQLite whatever happens here."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from betcode.push.vapid import VapidKey
from betcode.remote.web_push import GONE, PushNotPosted, RelayUnreachable, post
from betcode.storage.push_subscriptions import PushSubscription

log = logging.getLogger(__name__)

POST_TIMEOUT_SECONDS = 10.0
# How long a push service keeps a message for a browser that is offline: a waiting approval
# is worth delivering for a day.
MESSAGE_TTL_SECONDS = 86_400
VAPID_LIFETIME_SECONDS = 12 * 3600  # at most 24 h (RFC 8292)
TOPIC_CHARS = 32  # RFC 8030: at most 32 characters of the URL-safe base64 alphabet

Forget = Callable[[str], Awaitable[object]]
# The relay's delivery of one message: (endpoint, body, headers) → the push service's status;
# raises PushNotPosted when the relay did not POST it.
RelayPost = Callable[[str, bytes, Mapping[str, str]], Awaitable[int]]


@dataclass(frozen=True)
class RelayDelivery:
    """How relayed subscriptions' pushes reach the relay, and the machine id they carry (a
    phone at the relay's address answers and opens that machine's session from it)."""

    post: RelayPost
    machine_id: str


class PushSender:
    def __init__(
        self, key: VapidKey, forget: Forget, contact: str, relay: RelayDelivery | None = None
    ) -> None:
        """`forget(endpoint)` deletes a subscription its push service no longer knows;
        `contact` is VAPID's `sub` (daemon.web.push.contact); `relay` delivers the messages
        of relayed subscriptions (None: this daemon has no relay, they are not sent)."""
        self._key = key
        self._forget = forget
        self._contact = contact
        self._relay = relay
        self._http: aiohttp.ClientSession | None = None

    async def send(self, subscription: PushSubscription, payload: dict[str, Any]) -> bool:
        """True once the push service accepted the message. Raises RelayUnreachable when a
        relayed subscription's message could not be handed to the relay, for the caller to
        send again once it is back."""
        netloc = urlsplit(subscription.endpoint).netloc
        if subscription.relayed and self._relay is not None:
            payload = {**payload, "machine_id": self._relay.machine_id}
        body, headers = self.message(subscription, payload)
        way = "through the relay" if subscription.relayed else "direct"
        try:
            if not subscription.relayed:
                status = await post(self._client(), subscription.endpoint, body, headers)
            elif self._relay is None:
                raise PushNotPosted("this daemon has no relay")
            else:
                status = await self._relay.post(subscription.endpoint, body, headers)
        except RelayUnreachable:
            raise
        except PushNotPosted as error:
            log.warning("push to %s (%s) failed: %s", netloc, way, error)
            return False
        if status in GONE:
            log.info("push service dropped a subscription (%d): forgotten", status)
            await self._forget(subscription.endpoint)
            return False
        if not 200 <= status < 300:
            log.warning("push to %s (%s): the push service answered %d", netloc, way, status)
            return False
        return True

    def message(
        self, subscription: PushSubscription, payload: dict[str, Any]
    ) -> tuple[bytes, dict[str, str]]:
        """The encrypted body and the headers to POST with it (names lower case)."""
        # Imported here: only a daemon that pushes loads pywebpush (and its requests).
        from py_vapid import Vapid02
        from pywebpush import WebPusher

        data = json.dumps(payload, separators=(",", ":")).encode()
        body: bytes = WebPusher(subscription.subscription_info()).encode(data, "aes128gcm")["body"]
        url = urlsplit(subscription.endpoint)
        claims = {
            "sub": self._contact,
            "aud": f"{url.scheme}://{url.netloc}",
            "exp": int(time.time()) + VAPID_LIFETIME_SECONDS,
        }
        signed = Vapid02(private_key=self._key.private_key).sign(claims)
        headers = {
            "authorization": signed["Authorization"],
            "content-encoding": "aes128gcm",
            "ttl": str(MESSAGE_TTL_SECONDS),
            "urgency": "high",
        }
        if "notification_id" in payload:
            # A later message for the same notification (it was answered) replaces one the
            # push service still holds; a digest, so the id itself is not shown to it.
            headers["topic"] = topic_of(str(payload["notification_id"]))
        return body, headers

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT_SECONDS)
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()


def topic_of(notification_id: str) -> str:
    digest = hashlib.sha256(notification_id.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()[:TOPIC_CHARS]
