"""Who may use the web client: every request passes `guard` before any handler runs.

1. Host: on a loopback address only loopback names (a DNS-rebinding page reaches 127.0.0.1
   under its own name, and is refused here). With TLS the certificate already
   binds the name the browser connects to, so any name is accepted.
2. Origin: a request that carries one (every browser POST and WebSocket does) must come from
   this very origin: no cross-site request, no other local web app, reaches the daemon.
3. A credential (`devices`): a device's, or the owner's access token, as `Authorization:
   Bearer`, or for a WebSocket (whose browser API sets no header) as the subprotocol
   `bearer.CREDENTIAL`. Never a cookie: a cookie ignores ports, so every other web server on
   the same host would receive it. The page and its assets hold nothing secret and are
   served to anyone who passes 1 and 2 (the page then asks for a link); so is the exchange of
   a one-time link or pairing code. The owner's endpoints (links, codes, rotation) take the
   access token only; any signed-in client lists and revokes devices.
   Without a valid credential: 401 and a JSON error saying how to get a link.
4. Through the relay (`is_relayed`: the request came in on the daemon's private gateway socket,
   which only the web gateway connects to): a device's credential only, never the access token.
   Nothing a client sends can make a request look relayed, nor a relayed one look local.
   A device paired through the relay is taken only on relayed requests of the relay's device
   login it paired with (`relay_device`: the gateway passes on the relay's word), so revoking
   that login at the relay ends the device's credential here too.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from betcode.remote.frames import RELAY_DEVICE_METADATA
from betcode.web.devices import OWNER, Devices, Principal
from betcode.web.errors import refusal

log = logging.getLogger(__name__)

BEARER = "Bearer "
SUBPROTOCOL_BEARER = "bearer."
STREAM_SUBPROTOCOL = "betcode"  # what the server picks among a WebSocket's subprotocols
SIGN_IN_HINT = (
    "this browser is not signed in (or was signed out): on the machine running the daemon, "
    "run `betcode web` and open the one-time link it prints"
)
# Served to anyone who passes the Host and Origin checks: nothing in them is secret.
PUBLIC_PATHS = frozenset(
    {"/", "/sw.js", "/install.js", "/manifest.webmanifest", "/api/devices/pair"}
)
PUBLIC_PREFIXES = ("/static/", "/icons/")
# The owner's endpoints: the access token only, never a device's credential.
# (The list of devices and revoking one are any signed-in client's: a lost phone is signed out
# from the laptop at hand.)
OWNER_PATHS = ("/api/links", "/api/pairing-codes", "/api/rotate")
PRINCIPAL_KEY = web.RequestKey("principal", Principal)
RELAYED_KEY = web.RequestKey("relayed", bool)
RELAYED_OWNER_HINT = (
    "through the relay, sign in as a device (a link or pairing code), not with the access token"
)
RELAY_LOGIN_HINT = (
    "this device was paired through the relay and signs in only with the relay login it paired "
    "with (revoked, or another one): pair again with `betcode web pair`"
)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Access:
    devices: Devices
    port: int  # set again once bound (port 0 picks one then)
    tls: bool

    def host_allowed(self, host: str | None) -> bool:
        if self.tls:
            return True
        return host is not None and _loopback_host(host)

    def origin_allowed(self, origin: str, host: str) -> bool:
        scheme = "https" if self.tls else "http"
        return origin == f"{scheme}://{host}"


ACCESS_KEY = web.AppKey("access", Access)


def _loopback_host(host: str) -> bool:
    """`localhost`, `127.x.y.z` or `[::1]` with any port: the port may differ from ours when an
    ssh tunnel forwards another local port to this one, and a rebinding page cannot make
    the browser send a loopback name as its Host."""
    name, _, port = host.rpartition(":")
    if not name or host.endswith("]"):  # no port: the scheme's default
        name, port = host, "0"
    if not port.isdigit():
        return False
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def credential(request: web.Request) -> str:
    given = request.headers.get("Authorization", "")
    if given.startswith(BEARER):
        return given.removeprefix(BEARER).strip()
    for protocol in request.headers.get("Sec-WebSocket-Protocol", "").split(","):
        if protocol.strip().startswith(SUBPROTOCOL_BEARER):
            return protocol.strip().removeprefix(SUBPROTOCOL_BEARER)
    return ""


def principal(request: web.Request) -> Principal:
    return request[PRINCIPAL_KEY]


VIA_RELAY = "relay"  # what the audit says of a relayed request's answers


def via(request: web.Request) -> str:
    """How the request reached the daemon, as the audit records it ("" when directly)."""
    return VIA_RELAY if is_relayed(request) else ""


def is_relayed(request: web.Request) -> bool:
    """Whether the request came through the web gateway (the relay), not from a browser."""
    relayed = request.get(RELAYED_KEY)
    if relayed is None:
        # Known by the socket it arrived on (the gateway's Unix socket; the LAN listener is TCP),
        # kept for handlers that ask once the connection is gone.
        relayed = request[RELAYED_KEY] = _arrived_on_unix_socket(request)
    return relayed


def relay_device(request: web.Request) -> str | None:
    """The relay's device login a relayed request came from (a phone paired through the relay),
    as the relay said it; None for a LAN request or another kind of relay login."""
    if not is_relayed(request):
        return None
    return request.headers.get(RELAY_DEVICE_METADATA) or None


def _arrived_on_unix_socket(request: web.Request) -> bool:
    transport = request.transport
    connection = transport.get_extra_info("socket") if transport is not None else None
    return connection is not None and connection.family == socket.AF_UNIX


def make_guard(access: Access) -> Middleware:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        relayed = is_relayed(request)
        host = request.headers.get("Host")
        if not access.host_allowed(host):
            log.warning("web: refused a request for host %r", host)
            return refusal(403, "BAD_HOST", f"this server does not answer for host {host!r}")
        origin = request.headers.get("Origin")
        if origin is not None and not access.origin_allowed(origin, host or ""):
            log.warning("web: refused a request from origin %r", origin)
            return refusal(403, "BAD_ORIGIN", f"requests from origin {origin!r} are refused")
        if request.path in PUBLIC_PATHS or request.path.startswith(PUBLIC_PREFIXES):
            return await handler(request)
        who = access.devices.authenticate(credential(request))
        if who is None:
            return refusal(401, "UNAUTHENTICATED", SIGN_IN_HINT)
        if relayed and who.id == OWNER:
            return refusal(401, "UNAUTHENTICATED", RELAYED_OWNER_HINT)
        if who.relay_device_id is not None and relay_device(request) != who.relay_device_id:
            # Paired through the relay: taken only with the relay login it paired with, so
            # that revoking that login at the relay ends this credential too.
            return refusal(401, "UNAUTHENTICATED", RELAY_LOGIN_HINT)
        if request.path.startswith(OWNER_PATHS) and who.id != OWNER:
            return refusal(403, "OWNER_ONLY", "only the daemon's owner (`betcode web`) may do this")
        request[PRINCIPAL_KEY] = who
        return await handler(request)

    return guard
