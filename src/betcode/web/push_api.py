"""Web Push registration (betcode.push): the daemon's VAPID public key for the page's
`pushManager.subscribe`, and the page's subscription stored or removed. Behind the same access
check as every other endpoint."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from betcode.core.validation import invalid
from betcode.push.subscriptions import (
    SubscriptionRefused,
    Subscriptions,
    check_endpoint,
    parse_subscription,
)
from betcode.web.access import is_relayed, principal
from betcode.web.domain import web_client_id
from betcode.web.errors import json_body


@dataclass(frozen=True)
class PushEndpoints:
    public_key: str  # base64url, the page's applicationServerKey
    subscriptions: Subscriptions
    allow_loopback: bool  # daemon.web.push.allow_loopback_endpoints
    close: Callable[[], Awaitable[None]]  # once the web client stops


PUSH_KEY = web.AppKey("push", PushEndpoints)


def push_routes() -> list[web.RouteDef]:
    return [
        web.get("/api/push/vapid-public-key", vapid_public_key),
        web.post("/api/push/subscriptions", subscribe),
        web.delete("/api/push/subscriptions", unsubscribe),
    ]


async def vapid_public_key(request: web.Request) -> web.Response:
    return web.json_response({"public_key": request.app[PUSH_KEY].public_key})


async def subscribe(request: web.Request) -> web.Response:
    """The browser's PushSubscription JSON (`subscription.toJSON()`), for the signed-in device
    that sends it; registering the same endpoint again replaces its keys (and device). One
    registered through the relay is pushed to through the relay."""
    push = request.app[PUSH_KEY]
    body = await json_body(request)
    try:
        subscription = parse_subscription(
            body,
            client_id=web_client_id(request),
            device_id=principal(request).id,
            now=time.time(),
            allow_loopback=push.allow_loopback,
            relayed=is_relayed(request),
        )
        await push.subscriptions.save(subscription)
    except SubscriptionRefused as refused:
        raise invalid(str(refused)) from None
    return web.json_response({"endpoint": subscription.endpoint}, status=201)


async def unsubscribe(request: web.Request) -> web.Response:
    """`{"endpoint"}`: `removed` is false when it was not registered."""
    push = request.app[PUSH_KEY]
    body = await json_body(request)
    try:
        endpoint = check_endpoint(body.get("endpoint"), allow_loopback=True)
    except SubscriptionRefused as refused:
        raise invalid(str(refused)) from None
    return web.json_response({"removed": await push.subscriptions.delete(endpoint)})


async def close_push(app: web.Application) -> None:
    await app[PUSH_KEY].close()
