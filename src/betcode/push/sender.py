"""One Web Push message to one subscription, through pywebpush: the JSON payload encrypted to
the subscription's keys (aes128gcm), a VAPID header signed with the daemon's key, POSTed to
the endpoint (RFC 8030). A push service answering 404 or 410 has dropped the subscription:
its row is deleted. Other failures are logged, never raised: a push is a courtesy, the
request itself waits in SQLite whatever happens here."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from betcode.push.vapid import VapidKey
from betcode.storage.push_subscriptions import PushSubscription

log = logging.getLogger(__name__)

POST_TIMEOUT_SECONDS = 10.0
# How long a push service keeps a message for a browser that is offline: a waiting approval
# is worth delivering for a day.
MESSAGE_TTL_SECONDS = 86_400
GONE = (404, 410)

Forget = Callable[[str], Awaitable[object]]


class PushSender:
    def __init__(self, key: VapidKey, forget: Forget, contact: str) -> None:
        """`forget(endpoint)` deletes a subscription its push service no longer knows;
        `contact` is VAPID's `sub` (daemon.web.push.contact)."""
        self._key = key
        self._contact = contact
        self._forget = forget
        self._http: aiohttp.ClientSession | None = None

    async def send(self, subscription: PushSubscription, payload: dict[str, Any]) -> bool:
        """True once the push service accepted the message."""
        # Imported here: only a daemon that pushes loads pywebpush (and its requests).
        from py_vapid import Vapid02
        from pywebpush import WebPushException, webpush_async

        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT_SECONDS)
            )
        url = urlsplit(subscription.endpoint)
        try:
            await webpush_async(
                subscription.subscription_info(),
                data=json.dumps(payload, separators=(",", ":")),
                vapid_private_key=Vapid02(private_key=self._key.private_key),
                vapid_claims={"sub": self._contact, "aud": f"{url.scheme}://{url.netloc}"},
                ttl=MESSAGE_TTL_SECONDS,
                headers={"Urgency": "high"},
                aiohttp_session=self._http,
            )
        except WebPushException as error:
            status = error.response.status if error.response is not None else None
            if status in GONE:
                log.info("push service dropped a subscription (%d): forgotten", status)
                await self._forget(subscription.endpoint)
            else:
                log.warning("push to %s failed: %s", url.netloc, str(error).splitlines()[0])
            return False
        except (aiohttp.ClientError, TimeoutError) as error:
            log.warning("push to %s failed: %s", url.netloc, error or type(error).__name__)
            return False
        return True

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
