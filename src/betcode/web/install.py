"""The web client as an installable app: the web app manifest, its icons and the service worker
(`static/sw.js`: the app shell offline, Web Push notifications and their actions) and the
page's lines that register both (`static/install.js`), served beside the page and behind the
same access check. The service worker is served from the root
so that it may control the whole page."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from importlib.resources.abc import Traversable

from aiohttp import web

log = logging.getLogger(__name__)

INSTALL_FILES = {
    "sw.js": "text/javascript",
    "install.js": "text/javascript",
    "manifest.webmanifest": "application/manifest+json",
    "icon-192.png": "image/png",
    "icon-512.png": "image/png",
}
INSTALL_KEY = web.AppKey("install_files", dict[str, bytes])
SERVICE_WORKER = "sw.js"


def install_files(static: Traversable) -> dict[str, bytes]:
    """The files, read once. The service worker is built by esbuild (web-client/src/sw.ts):
    a source tree not built has none, answered 404 (and said in the daemon's log) rather than
    the daemon not starting."""
    files = {name: (static / name).read_bytes() for name in INSTALL_FILES if name != SERVICE_WORKER}
    if (static / SERVICE_WORKER).is_file():
        files[SERVICE_WORKER] = (static / SERVICE_WORKER).read_bytes()
    else:
        log.error("web client: %s not built; run scripts/setup", SERVICE_WORKER)
    return files


def install_routes() -> list[web.RouteDef]:
    return [
        web.get("/sw.js", _file("sw.js")),
        web.get("/install.js", _file("install.js")),
        web.get("/manifest.webmanifest", _file("manifest.webmanifest")),
        web.get("/icons/{name}", _icon),
    ]


def _file(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def serve(request: web.Request) -> web.Response:
        return _response(request, name)

    return serve


async def _icon(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if not name.endswith(".png") or name not in INSTALL_FILES:
        raise web.HTTPNotFound()
    return _response(request, name)


def _response(request: web.Request, name: str) -> web.Response:
    body = request.app[INSTALL_KEY].get(name)
    if body is None:
        raise web.HTTPNotFound()
    return web.Response(body=body, content_type=INSTALL_FILES[name])
