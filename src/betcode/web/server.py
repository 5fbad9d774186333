"""The web client's HTTP server: the aiohttp app, bound on the daemon's own event loop.

Started by the daemon after its gRPC server. Always on the private gateway socket (owner-only,
next to the daemon's socket), where the web gateway (server/web_gateway_service.py) brings the
relay's browsers; on the LAN too when `daemon.http.listen` is set: it then writes
`<data dir>/web-address` (the base URL, for `betcode web`) once it listens, and removes it
when it stops. Stopping closes every open stream first (code 1001, "going away"): the pages
reconnect from their last sequence to whatever daemon serves next.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import stat
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from aiohttp import WSCloseCode, web

from betcode.config.addresses import split_host_port
from betcode.config.settings import HttpSettings
from betcode.daemon_socket import owner_only_umask
from betcode.web.access import ACCESS_KEY, Access, make_guard
from betcode.web.api import DOMAIN_KEY, api_routes
from betcode.web.commands_api import COMMANDS_KEY, WebCommands, command_routes
from betcode.web.devices import Devices
from betcode.web.devices_api import DEVICES_KEY, device_routes
from betcode.web.domain import WebDomain
from betcode.web.errors import MAX_PAYLOAD_KEY, translate_errors
from betcode.web.install import INSTALL_KEY, install_files, install_routes
from betcode.web.push_api import PUSH_KEY, PushEndpoints, close_push, push_routes
from betcode.web.stream import OPEN_SOCKETS_KEY, stream_routes

log = logging.getLogger(__name__)

ADDRESS_FILE = "web-address"
SHUTDOWN_SECONDS = 2.0
STATIC = resources.files("betcode.web") / "static"
# The page: index.html, and the bundle esbuild makes from web-client/ (scripts/setup builds it;
# nothing comes from a CDN).
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
BUILD_HINT = "run scripts/setup (or: cd web-client && npm ci && npm run build)"
NOT_BUILT_PAGE = (
    "<!doctype html><meta charset=utf-8><meta name=viewport content='width=device-width'>"
    "<title>BetCode: web client not built</title><h1>BetCode</h1>"
    "<p>The web client's bundle (<code>betcode/web/static/app.js</code>) is not built. On the "
    f"machine running the daemon, {BUILD_HINT}, then restart the daemon.</p>"
)
PAGE_KEY = web.AppKey("page", dict[str, bytes])
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class WebStartError(Exception):
    """The web client cannot start: `exit_code` is 65 for a TLS file that cannot be used,
    69 for an address that cannot be bound."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class WebPlaces:
    config_dir: Path  # holds the access token
    data_dir: Path  # gets the address file
    gateway_socket: Path  # where the web gateway reaches the app


def address_path(data_dir: Path) -> Path:
    return data_dir / ADDRESS_FILE


class WebServer:
    """`listen` (TLS files read, the address bound: refusals before the daemon changes
    anything), then `start` (serving the daemon's sessions), then `stop`."""

    def __init__(self, settings: HttpSettings, places: WebPlaces) -> None:
        self._settings = settings
        self._places = places
        self._listener: socket.socket | None = None
        self._gateway: socket.socket | None = None
        self._tls: ssl.SSLContext | None = None
        self._runner: web.AppRunner | None = None
        self.url: str | None = None  # the LAN listener's; None without one

    def listen(self) -> None:
        self._gateway = _bind_gateway(self._places.gateway_socket)
        if self._settings.listen:
            self._listen_lan()

    def _listen_lan(self) -> None:
        host, port = split_host_port(self._settings.listen)
        self._tls = self._tls_context()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        address = "127.0.0.1" if host == "localhost" else host
        try:
            self._listener = socket.create_server((address, port), family=family)
        except OSError as error:
            raise WebStartError(
                f"the web client cannot listen on {self._settings.listen}: {error.strerror}", 69
            ) from error
        bound_port = self._listener.getsockname()[1]  # port 0 picks one
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{'https' if self._tls else 'http'}://{shown}:{bound_port}"

    async def start(
        self, domain: WebDomain, push: PushEndpoints, devices: Devices, commands: WebCommands
    ) -> None:
        assert self._gateway is not None, "listen() first"
        tls = self._tls is not None
        port = self._listener.getsockname()[1] if self._listener is not None else 0
        access = Access(devices, port, tls)
        runner = web.AppRunner(
            self._build_app(access, domain, push, commands),
            access_log=None,
            shutdown_timeout=SHUTDOWN_SECONDS,
        )
        await runner.setup()
        self._runner = runner
        await web.SockSite(runner, self._gateway).start()
        if self._listener is None:
            log.info("web client: no LAN listener; the web gateway serves it through the relay")
            return
        await web.SockSite(runner, self._listener, ssl_context=self._tls).start()
        path = address_path(self._places.data_dir)
        path.write_text(f"{self.url}\n")
        path.chmod(0o600)
        log.info("web client serving on %s (`betcode web` prints the link)", self.url)

    def _tls_context(self) -> ssl.SSLContext | None:
        if not self._settings.tls_cert:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self._settings.tls_cert, self._settings.tls_key)
        except (OSError, ssl.SSLError) as error:
            raise WebStartError(
                f"daemon.http.tls_cert / tls_key ({self._settings.tls_cert}, "
                f"{self._settings.tls_key}) cannot be used: {error}",
                65,
            ) from error
        return context

    def _build_app(
        self, access: Access, domain: WebDomain, push: PushEndpoints, commands: WebCommands
    ) -> web.Application:
        app = web.Application(
            middlewares=[make_guard(access), translate_errors],
            client_max_size=domain.max_payload_bytes,
        )
        app[DOMAIN_KEY] = domain
        app[ACCESS_KEY] = access
        app[MAX_PAYLOAD_KEY] = domain.max_payload_bytes
        app[OPEN_SOCKETS_KEY] = set()
        app[PUSH_KEY] = push
        app[DEVICES_KEY] = access.devices
        app[COMMANDS_KEY] = commands
        app[INSTALL_KEY] = install_files(STATIC)
        app[PAGE_KEY] = page_files(STATIC)
        app.router.add_routes(
            [
                web.get("/", _index),
                web.get("/static/{name}", _asset),
                *install_routes(),
                *api_routes(),
                *push_routes(),
                *device_routes(),
                *command_routes(),
            ]
        )
        app.router.add_routes(stream_routes())
        app.on_response_prepare.append(_security_headers)
        app.on_shutdown.append(_close_streams)
        app.on_cleanup.append(close_push)
        return app

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            with contextlib.suppress(FileNotFoundError):
                address_path(self._places.data_dir).unlink()
            await runner.cleanup()
        for listener in (self._listener, self._gateway):
            if listener is not None:
                listener.close()
        if self._gateway is not None:
            with contextlib.suppress(FileNotFoundError):
                self._places.gateway_socket.unlink()
        self._listener = self._gateway = None


def _bind_gateway(path: Path) -> socket.socket:
    """The gateway's Unix socket, only its owner may connect to (made so at bind: no moment in
    which others could). A socket left there by a daemon that died is replaced: the daemon's
    own socket lock, taken before, says no other daemon uses it."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with owner_only_umask():
            listener.bind(os.fspath(path))
        listener.listen(socket.SOMAXCONN)
    except OSError as error:
        listener.close()
        raise WebStartError(f"the web gateway cannot listen on {path}: {error}", 69) from error
    return listener


def page_files(static: Traversable) -> dict[str, bytes]:
    """index.html and the bundle; without the bundle, a page saying how to build it (and an
    error in the daemon's log), so a daemon from a source tree never serves a blank page."""
    missing = [name for name in ASSETS if not (static / name).is_file()]
    if missing:
        log.error("web client: %s not built; %s", ", ".join(missing), BUILD_HINT)
        return {"index.html": NOT_BUILT_PAGE.encode()}
    return {name: (static / name).read_bytes() for name in ("index.html", *ASSETS)}


async def _index(request: web.Request) -> web.Response:
    return web.Response(body=request.app[PAGE_KEY]["index.html"], content_type="text/html")


async def _asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in ASSETS or name not in request.app[PAGE_KEY]:
        raise web.HTTPNotFound()
    return web.Response(body=request.app[PAGE_KEY][name], content_type=ASSETS[name])


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for key, value in SECURITY_HEADERS.items():
        response.headers.setdefault(key, value)


async def _close_streams(app: web.Application) -> None:
    sockets = app[OPEN_SOCKETS_KEY].copy()
    for stream in sockets:
        await stream.close(code=WSCloseCode.GOING_AWAY, message=b"the daemon is stopping")
