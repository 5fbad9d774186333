"""Who may use the web client: every request passes `guard` before any handler runs.

1. Host: on a loopback address only loopback names (a DNS-rebinding page reaches 127.0.0.1
   under its own name, and is refused here). With TLS the certificate already
   binds the name the browser connects to, so any name is accepted.
2. Origin: a request that carries one (every browser POST and WebSocket does) must come from
   this very origin: no cross-site request, no other local web app, reaches the daemon.
3. The access token (`token.TokenFile`): in the URL once (`/?token=...`, answered by a
   redirect that sets an HttpOnly SameSite=Strict cookie and drops the token from the address
   bar and history), then in that cookie. Without it: 401 and a page saying how to get a link,
   nothing else.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from betcode.web.errors import refusal
from betcode.web.token import TokenFile

log = logging.getLogger(__name__)

COOKIE_NAME = "betcode_token"
TOKEN_PARAMETER = "token"
LOGIN_HINT = (
    "<!doctype html><meta charset=utf-8><meta name=viewport content='width=device-width'>"
    "<title>BetCode: sign in</title><h1>BetCode</h1>"
    "<p>This page needs the daemon's access link. On the machine running the daemon, run "
    "<code>betcode web</code> and open the link it prints.</p>"
)


def still_signed_in(request: web.Request) -> bool:
    """Whether the request's cookie still holds the current token (a rotation ends it)."""
    return request.app[ACCESS_KEY].token.matches(request.cookies.get(COOKIE_NAME, ""))


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Access:
    token: TokenFile
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


def make_guard(access: Access) -> Middleware:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        if not access.host_allowed(host):
            log.warning("web: refused a request for host %r", host)
            return refusal(403, "BAD_HOST", f"this server does not answer for host {host!r}")
        origin = request.headers.get("Origin")
        if origin is not None and not access.origin_allowed(origin, host or ""):
            log.warning("web: refused a request from origin %r", origin)
            return refusal(403, "BAD_ORIGIN", f"requests from origin {origin!r} are refused")
        given = request.query.get(TOKEN_PARAMETER)
        if given is not None and request.method == "GET" and request.path == "/":
            if not access.token.matches(given):
                return _login_hint()
            response = web.Response(status=303, headers={"Location": "/"})
            response.set_cookie(
                COOKIE_NAME,
                given,
                httponly=True,
                samesite="Strict",
                secure=access.tls,
                path="/",
                max_age=400 * 24 * 3600,  # browsers cap it at 400 days
            )
            return response
        if not access.token.matches(request.cookies.get(COOKIE_NAME, "")):
            return _login_hint()
        return await handler(request)

    return guard


def _login_hint() -> web.Response:
    return web.Response(status=401, text=LOGIN_HINT, content_type="text/html", headers=_NO_STORE)


_NO_STORE = {"Cache-Control": "no-store"}
