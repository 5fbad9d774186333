"""A local RFC 8030 push service on 127.0.0.1, standing in for a browser vendor's: it takes the
POST a Web Push sender makes to a subscription's endpoint, checks the VAPID Authorization
header (RFC 8292: `vapid t=JWT, k=KEY`, the JWT ES256-signed by KEY, `aud` this service's
origin, `exp` within 24 hours, a `sub`) and decrypts the aes128gcm body (RFC 8291) with the
private key and auth secret of the subscription it made, as the browser would. A test reads
the pushes received, each decrypted (and as it came, with the process that sent it); an
endpoint can be made to answer 410 (gone)."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import http_ece
import jwt
import psutil
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

VAPID_MAX_LIFETIME = 24 * 3600


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class BrowserSubscription:
    """What a browser keeps for one subscription, and the PushSubscription JSON it gives."""

    endpoint: str
    private_key: ec.EllipticCurvePrivateKey
    auth: bytes

    def json(self) -> dict[str, Any]:
        public = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {
            "endpoint": self.endpoint,
            "keys": {"p256dh": b64url(public), "auth": b64url(self.auth)},
        }


@dataclass
class ReceivedPush:
    endpoint: str
    payload: dict[str, Any]
    claims: dict[str, Any]
    vapid_key: str  # the `k` of the Authorization header
    headers: dict[str, str]  # names in lower case
    body: bytes  # as it came, encrypted
    sender_pid: int | None  # the process whose connection POSTed it (None: not found)
    received_at: float = field(default_factory=time.monotonic)


class PushService:
    def __init__(self) -> None:
        self.url = ""
        self.received: list[ReceivedPush] = []
        self.refused: list[str] = []  # why each refused POST was refused
        self.gone: set[str] = set()  # endpoints answered with 410
        self._subscriptions: dict[str, BrowserSubscription] = {}
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def start(self) -> PushService:
        app = web.Application()
        app.router.add_post("/push/{id}", self._receive)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def subscribe(self) -> BrowserSubscription:
        """A new subscription, as `pushManager.subscribe` makes one."""
        endpoint = f"{self.url}/push/{secrets.token_urlsafe(12)}"
        subscription = BrowserSubscription(
            endpoint, ec.generate_private_key(ec.SECP256R1()), secrets.token_bytes(16)
        )
        self._subscriptions[endpoint] = subscription
        return subscription

    async def wait_for(self, count: int, within_s: float = 30.0) -> list[ReceivedPush]:
        """Until `count` pushes have been received; all of them."""

        async def wait() -> None:
            while len(self.received) < count:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), within_s)
        return self.received

    async def _receive(self, request: web.Request) -> web.Response:
        endpoint = f"{self.url}{request.path}"
        peer = request.transport.get_extra_info("peername") if request.transport else None
        subscription = self._subscriptions.get(endpoint)
        try:
            if subscription is None or endpoint in self.gone:
                return web.Response(status=410 if subscription else 404)
            claims, key = self._check_vapid(request.headers.get("Authorization", ""))
            if request.headers.get("Content-Encoding") != "aes128gcm":
                raise Refused(f"Content-Encoding {request.headers.get('Content-Encoding')!r}")
            if not request.headers.get("TTL", "").isdigit():
                raise Refused("no TTL header")
            body = await request.read()
            plain = http_ece.decrypt(
                body,
                private_key=subscription.private_key,
                auth_secret=subscription.auth,
                version="aes128gcm",
            )
        except Refused as refused:
            self.refused.append(str(refused))
            return web.Response(status=400 if "VAPID" not in str(refused) else 403)
        finally:
            self._changed.set()
        self.received.append(
            ReceivedPush(
                endpoint,
                json.loads(plain),
                claims,
                key,
                {k.lower(): v for k, v in request.headers.items()},
                body,
                sender_of(peer),
            )
        )
        self._changed.set()
        return web.Response(status=201, headers={"Location": f"{self.url}/message/1"})

    def _check_vapid(self, authorization: str) -> tuple[dict[str, Any], str]:
        scheme, _, params = authorization.partition(" ")
        if scheme.lower() != "vapid":
            raise Refused(f"VAPID: Authorization scheme {scheme!r}")
        fields = dict(part.strip().split("=", 1) for part in params.split(","))
        token, key = fields.get("t", ""), fields.get("k", "")
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(key))
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                public,
                algorithms=["ES256"],
                audience=self.url,
                options={"require": ["aud", "exp", "sub"]},
            )
        except jwt.InvalidTokenError as error:
            raise Refused(f"VAPID: {error}") from None
        if claims["exp"] > time.time() + VAPID_MAX_LIFETIME:
            raise Refused("VAPID: exp more than 24 hours ahead")
        if not str(claims["sub"]).startswith(("mailto:", "https://")):
            raise Refused(f"VAPID: sub {claims['sub']!r}")
        return claims, key


def sender_of(peer: tuple[str, int] | None) -> int | None:
    """The process holding the TCP connection that `peer` is the far end of (all on this
    machine): tells the relay's POST from the daemon's."""
    if peer is None:
        return None
    for connection in psutil.net_connections(kind="tcp"):
        if connection.laddr and tuple(connection.laddr)[:2] == tuple(peer)[:2]:
            return connection.pid
    return None


class Refused(Exception):
    pass
