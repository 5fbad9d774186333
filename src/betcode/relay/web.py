"""The relay's web front: what a browser gets on the relay's one address (relay/front.py hands
it every connection that offers HTTP/1.1), as a browser can use it (HTTP and WebSockets, no
gRPC).

- `GET /`: the web client's relay page (`relay.html`); `GET /static/NAME`: any file of the web
  client's static directory (betcode/web/static, built from web-client/), and at the places the
  app expects them `/sw.js` (at the root, so that its scope is the whole origin),
  `/install.js`, `/manifest.webmanifest`, `/icons/NAME.png`. Nothing in them is secret; no
  directory listing.
- `POST /relay/api/login` `{"username", "password"}`: the relay account's login (AuthService),
  answered `{"access_token", "refresh_token", "user_id", "expires_in_secs"}`; 10 attempts a
  minute per browser address, as for gRPC clients (the front names the browser's address to
  AuthService, with a secret made at each start that proves the front said so).
- `POST /relay/api/refresh` `{"refresh_token"}`: a new pair, same shape (rotation: the refresh
  token is good once; a used or revoked one is refused with 401).
- `POST /relay/api/pair` `{"ticket", "name"?}`: a machine's pairing ticket (docs/RELAY.md "Pairing
  a phone through the relay") exchanged for a device login of the machine's owner that reaches
  that machine only, answered `{"access_token", "refresh_token", "expires_in_secs", "user_id",
  "machine_id", "device_id"}`; without a name the device is named after the browser's user
  agent. Wrong tickets are limited per browser address as logins are.
- `GET /relay/api/machines`: the caller's machines and their state (MachineService).
- `GET /relay/api/devices`: the account's device logins `{"devices": [{"device_id", "name",
  "machine_id", "created_at", "last_used_at", "revoked_at"}]}` (seconds; `revoked_at` null while
  signed in), and `DELETE /relay/api/devices/{id}` to revoke one at once; any login of the
  account, a paired phone's included.
- `GET /relay/api/machines/{id}/call` upgraded to a WebSocket: one call to the machine, carried
  as it comes. The first message is JSON `{"method", "e2e", "token", "client_id"}` (the full
  method name, the `x-betcode-e2e` value, the access token, the client id `web-...`), then each
  binary message is one request message, and the text `end` half-closes. The answer: one binary
  message per response message, then JSON `{"code", "message"}` (a gRPC status name; with
  `"buffered": PLACE` when the relay keeps the request for an offline machine). The front does
  not look inside: the messages are the end-to-end scheme's `EncryptedPayload`s, sealed and
  opened in the browser (web-client/src/e2e.ts), so the relay and NATS carry only ciphertext for
  a browser too.
- `POST /relay/api/machines/{id}/unary`: the same call for a browser context without WebSocket
  (a service worker may lack it), its head and request messages in one JSON body
  `{"method", "e2e", "token", "client_id", "messages": [base64...]}`, answered once the call
  ends with `{"code", "message", "messages": [base64...]}` (and `buffered`), with the same
  checks; a body of at most 1 MiB (413 beyond).

The front is a client of this relay's own grpcio server (TLS on loopback): the calls take
exactly the path, checks, audit and offline buffering of every other client's. Credentials are
the relay's access token as `Authorization: Bearer` (a WebSocket, whose browser API sets no
header: in its first message), never a cookie. `ROUTES` is the route table.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import ssl
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import grpc
from aiohttp import WSMsgType, web
from cryptography import x509

from betcode.relay.auth_service import FORWARDED_KEY, FRONT_SECRET_KEY
from betcode.remote import frames
from betcode.remote.frames import BUFFERED_TRAILER
from betcode.v1 import auth_pb2, auth_pb2_grpc, machine_pb2, machine_pb2_grpc

log = logging.getLogger(__name__)

STATIC = resources.files("betcode.web") / "static"
PAGE = "relay.html"
# What the static directory's files are served as, by suffix (a file of another kind is not
# served).
CONTENT_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".webmanifest": "application/manifest+json",
    ".json": "application/json",
    ".map": "application/json",
}
# Served at the root as well as under /static/, where the app looks for them.
AT_ROOT = ("sw.js", "install.js", "manifest.webmanifest")
BEARER = "Bearer "
CALL_SUBPROTOCOL = "betcode"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
METADATA_VALUE = re.compile(r"[\x21-\x7e]{0,4096}")
CLIENT_ID = re.compile(r"web-[A-Za-z0-9._-]{1,80}")
CHANNEL_KEY = web.AppKey("channel", grpc.aio.Channel)
FRONT_SECRET = web.AppKey("front_secret", str)
FILES_KEY = web.AppKey("files", dict[str, tuple[bytes, str]])
RETRY_AFTER_MS = "retry-after-ms"


def _refusal(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


def _grpc_refusal(error: grpc.aio.AioRpcError) -> web.Response:
    status = {
        grpc.StatusCode.UNAUTHENTICATED: 401,
        grpc.StatusCode.PERMISSION_DENIED: 403,
        grpc.StatusCode.NOT_FOUND: 404,
        grpc.StatusCode.INVALID_ARGUMENT: 400,
        grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
        grpc.StatusCode.UNAVAILABLE: 503,
    }.get(error.code(), 502)
    return _refusal(status, error.code().name, error.details() or error.code().name)


def _token(request: web.Request) -> str:
    return request.headers.get("Authorization", "").removeprefix(BEARER).strip()


async def _static(request: web.Request) -> web.Response:
    name = request.match_info.get("name") or PAGE
    file = request.app[FILES_KEY].get(name)
    if file is None:
        raise web.HTTPNotFound()
    body, content_type = file
    return web.Response(body=body, content_type=content_type)


async def _icon(request: web.Request) -> web.Response:
    if not request.match_info["name"].endswith(".png"):
        raise web.HTTPNotFound()
    return await _static(request)


def _root_file(name: str) -> Callable[[web.Request], Any]:
    async def serve(request: web.Request) -> web.Response:
        request.match_info["name"] = name
        return await _static(request)

    return serve


async def _body(request: web.Request, *fields: str) -> list[str] | None:
    """The named string fields of the JSON body; None if it is not such a body."""
    try:
        body = await request.json()
        values = [body[name] for name in fields]
    except (ValueError, KeyError, TypeError):
        return None
    return values if all(isinstance(value, str) for value in values) else None


def _token_pair(reply: Any, **more: str) -> web.Response:
    return web.json_response(
        {
            "access_token": reply.access_token,
            "refresh_token": reply.refresh_token,
            "expires_in_secs": reply.expires_in_secs,
            **more,
        }
    )


async def _login(request: web.Request) -> web.Response:
    fields = await _body(request, "username", "password")
    if fields is None:
        return _refusal(400, "INVALID_ARGUMENT", 'send {"username", "password"}')
    username, password = fields
    try:
        reply = await auth_pb2_grpc.AuthServiceStub(request.app[CHANNEL_KEY]).Login(
            auth_pb2.LoginRequest(username=username, password=password),
            metadata=(
                (FRONT_SECRET_KEY, request.app[FRONT_SECRET]),
                (FORWARDED_KEY, request.remote or ""),
            ),
        )
    except grpc.aio.AioRpcError as error:
        return _grpc_refusal(error)
    return _token_pair(reply, user_id=reply.user_id)


async def _refresh(request: web.Request) -> web.Response:
    fields = await _body(request, "refresh_token")
    if fields is None:
        return _refusal(400, "INVALID_ARGUMENT", 'send {"refresh_token"}')
    try:
        reply = await auth_pb2_grpc.AuthServiceStub(request.app[CHANNEL_KEY]).RefreshToken(
            auth_pb2.RefreshTokenRequest(refresh_token=fields[0])
        )
    except grpc.aio.AioRpcError as error:
        return _grpc_refusal(error)
    return _token_pair(reply)


async def _pair(request: web.Request) -> web.Response:
    """A pairing ticket (from `betcode web pair`'s QR code) exchanged for a device login that
    reaches the ticket's machine: no password on the phone."""
    try:
        body = await request.json()
        ticket = str(body["ticket"])
        name = str(body.get("name") or device_name(request.headers.get("User-Agent", "")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return _refusal(400, "INVALID_ARGUMENT", 'send {"ticket"} (and optionally "name")')
    try:
        reply = await auth_pb2_grpc.AuthServiceStub(request.app[CHANNEL_KEY]).PairDevice(
            auth_pb2.PairDeviceRequest(ticket=ticket, name=name),
            metadata=(
                (FRONT_SECRET_KEY, request.app[FRONT_SECRET]),
                (FORWARDED_KEY, request.remote or ""),
            ),
        )
    except grpc.aio.AioRpcError as error:
        refusal = _grpc_refusal(error)
        trailers = {key: str(value) for key, value in error.trailing_metadata() or ()}
        if RETRY_AFTER_MS in trailers:
            refusal.headers["Retry-After"] = str(
                max(1, round(int(trailers[RETRY_AFTER_MS]) / 1000))
            )
        return refusal
    return _token_pair(
        reply, user_id=reply.user_id, machine_id=reply.machine_id, device_id=reply.device_id
    )


BROWSERS = (("Edg/", "Edge"), ("Firefox/", "Firefox"), ("Chrome/", "Chrome"), ("Safari/", "Safari"))
SYSTEMS = (
    ("Android", "Android"),
    ("iPhone", "iPhone"),
    ("iPad", "iPad"),
    ("Mac OS X", "macOS"),
    ("Windows", "Windows"),
    ("Linux", "Linux"),
)


def device_name(user_agent: str) -> str:
    """`Chrome on Android`: what a device list shows for a browser that gave no name."""
    browser = next((name for mark, name in BROWSERS if mark in user_agent), "a browser")
    system = next((name for mark, name in SYSTEMS if mark in user_agent), "")
    return f"{browser} on {system}" if system else browser


async def _machines(request: web.Request) -> web.Response:
    stub = machine_pb2_grpc.MachineServiceStub(request.app[CHANNEL_KEY])
    try:
        reply = await stub.ListMachines(
            machine_pb2.ListMachinesRequest(),
            metadata=(("authorization", f"Bearer {_token(request)}"),),
        )
    except grpc.aio.AioRpcError as error:
        return _grpc_refusal(error)
    machines = [
        {
            "machine_id": m.machine_id,
            "name": m.name,
            "status": machine_pb2.MachineStatus.Name(m.status),
            "last_seen": m.last_seen.seconds if m.HasField("last_seen") else None,
        }
        for m in reply.machines
    ]
    return web.json_response({"machines": machines})


async def _devices(request: web.Request) -> web.Response:
    """The account's device logins (phones paired through the relay), for any of its logins."""
    stub = auth_pb2_grpc.AuthServiceStub(request.app[CHANNEL_KEY])
    try:
        reply = await stub.ListDevices(
            auth_pb2.ListDevicesRequest(),
            metadata=(("authorization", f"Bearer {_token(request)}"),),
        )
    except grpc.aio.AioRpcError as error:
        return _grpc_refusal(error)
    devices = [
        {
            "device_id": d.device_id,
            "name": d.name,
            "machine_id": d.machine_id,
            "created_at": d.created_at.seconds,
            "last_used_at": d.last_used_at.seconds,
            "revoked_at": d.revoked_at.seconds if d.HasField("revoked_at") else None,
        }
        for d in reply.devices
    ]
    return web.json_response({"devices": devices})


async def _revoke_device(request: web.Request) -> web.Response:
    stub = auth_pb2_grpc.AuthServiceStub(request.app[CHANNEL_KEY])
    try:
        await stub.RevokeDevice(
            auth_pb2.RevokeDeviceRequest(device_id=request.match_info["device_id"]),
            metadata=(("authorization", f"Bearer {_token(request)}"),),
        )
    except grpc.aio.AioRpcError as error:
        return _grpc_refusal(error)
    return web.json_response({"revoked": True})


HEAD_SHAPE = 'the first message is {"method", "token", ...}'


class _BadHead(ValueError):
    """A call's head that is refused (INVALID_ARGUMENT) before anything is carried."""


def _call_head(head: Any, machine_id: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A call's head `{"method", "e2e", "token", "client_id"}` checked: the method and the
    metadata the relay's own server gets it with."""
    try:
        method = str(head["method"]).lstrip("/")
    except (KeyError, TypeError):
        raise _BadHead(HEAD_SHAPE) from None
    if not method.startswith("betcode.v1."):
        raise _BadHead(f"not a BetCode method: {method!r}")
    token, header, client = (str(head.get(k) or "") for k in ("token", "e2e", "client_id"))
    if not all(METADATA_VALUE.fullmatch(value) for value in (token, header, machine_id)):
        raise _BadHead("the token, e2e and machine are printable ASCII")
    metadata = [
        ("authorization", f"Bearer {token}"),
        ("x-machine-id", machine_id),
        ("x-client-id", client if CLIENT_ID.fullmatch(client) else "web-relay"),
    ]
    if header:
        metadata.append(("x-betcode-e2e", header))
    return method, tuple(metadata)


def _ended(error: grpc.aio.AioRpcError) -> dict[str, str]:
    """A call's end as the page reads it; `buffered`: the relay kept the request for the
    offline machine (its place), to run once the machine is back."""
    trailers = {key: str(value) for key, value in error.trailing_metadata() or ()}
    status = {"code": error.code().name, "message": error.details() or ""}
    buffered = trailers.get(BUFFERED_TRAILER, "")
    return status | ({"buffered": buffered} if buffered else {})


async def _call(request: web.Request) -> web.StreamResponse:
    """One gRPC call to the machine, its messages carried both ways untouched."""
    socket_ = web.WebSocketResponse(
        protocols=(CALL_SUBPROTOCOL,), max_msg_size=frames.MAX_MESSAGE_BYTES
    )
    await socket_.prepare(request)
    opening = await socket_.receive()
    try:
        head: Any = json.loads(opening.data) if opening.type is WSMsgType.TEXT else {}
        method, metadata = _call_head(head, request.match_info["machine_id"])
    except ValueError as error:  # _BadHead, or not JSON
        said = str(error) if isinstance(error, _BadHead) else HEAD_SHAPE
        await _finish(socket_, {"code": "INVALID_ARGUMENT", "message": said})
        return socket_
    carry = request.app[CHANNEL_KEY].stream_stream(f"/{method}")

    async def requests() -> AsyncIterator[bytes]:
        async for message in socket_:
            if message.type is WSMsgType.BINARY:
                yield bytes(message.data)
            elif message.type is WSMsgType.TEXT and message.data == "end":
                return
            else:
                break

    call = carry(requests(), metadata=metadata)
    try:
        async for answer in call:
            await socket_.send_bytes(answer)
        await _finish(socket_, {"code": "OK", "message": ""})
    except grpc.aio.AioRpcError as error:
        await _finish(socket_, _ended(error))
    except ConnectionError:
        pass  # the page left the call (a conversation goes on on the machine without it)
    finally:
        call.cancel()
    return socket_


async def _unary(request: web.Request) -> web.Response:
    """The call WebSocket's head and request messages in one POST, for a browser context
    without WebSocket (a service worker may have none): `{"method", "e2e", "token",
    "client_id", "messages": [base64, ...]}`, all of them sent then half-closed; answered 200
    `{"code", "message", "messages": [base64, ...]}` (`buffered` as on the WebSocket) once the
    call ends. The same checks, and the messages as untouched."""
    try:
        head: Any = await request.json()
        method, metadata = _call_head(head, request.match_info["machine_id"])
        messages = [base64.b64decode(m, validate=True) for m in head.get("messages") or []]
    except (ValueError, TypeError, AttributeError) as error:
        said = str(error) if isinstance(error, _BadHead) else 'send {"method", ..., "messages"}'
        return _refusal(400, "INVALID_ARGUMENT", said)
    carry = request.app[CHANNEL_KEY].stream_stream(f"/{method}")

    async def requests() -> AsyncIterator[bytes]:
        for message in messages:
            yield message

    answers: list[str] = []
    call = carry(requests(), metadata=metadata)
    status = {"code": "OK", "message": ""}
    try:
        async for answer in call:
            answers.append(base64.b64encode(answer).decode())
    except grpc.aio.AioRpcError as error:
        status = _ended(error)
    finally:
        call.cancel()
    return web.json_response(status | {"messages": answers})


async def _finish(socket_: web.WebSocketResponse, status: dict[str, str]) -> None:
    """The call's end (its status, _ended's shape)."""
    with contextlib.suppress(ConnectionError):
        await socket_.send_str(json.dumps(status))
        await socket_.close()


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for key, value in SECURITY_HEADERS.items():
        response.headers.setdefault(key, value)


def static_files() -> dict[str, tuple[bytes, str]]:
    """Every servable file of the static directory: its bytes and content type. A relay
    started from a source tree without the built web client says so at `/`."""
    files = {
        entry.name: (entry.read_bytes(), CONTENT_TYPES[suffix])
        for entry in STATIC.iterdir()
        if entry.is_file() and (suffix := "." + entry.name.rpartition(".")[2]) in CONTENT_TYPES
    }
    if "app.js" not in files:
        log.error("relay web front: the web client is not built (run scripts/setup)")
        files[PAGE] = (b"<!doctype html><title>BetCode relay</title><p>Not built.", "text/html")
    return files


ROUTES = [
    web.get("/", _static),
    web.get("/static/{name}", _static),
    *(web.get(f"/{name}", _root_file(name)) for name in AT_ROOT),
    web.get("/icons/{name}", _icon),
    web.post("/relay/api/login", _login),
    web.post("/relay/api/refresh", _refresh),
    web.post("/relay/api/pair", _pair),
    web.get("/relay/api/machines", _machines),
    web.get("/relay/api/devices", _devices),
    web.delete("/relay/api/devices/{device_id}", _revoke_device),
    web.get("/relay/api/machines/{machine_id}/call", _call),
    web.post("/relay/api/machines/{machine_id}/unary", _unary),
]


def certificate_name(cert_pem: bytes) -> str:
    """The first name the certificate is for: what the front's own TLS connection to the
    relay's port checks (it connects to loopback, whatever name the relay is reached by)."""
    certificate = x509.load_pem_x509_certificate(cert_pem)
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "localhost"
    for name in names:
        if isinstance(name, x509.DNSName):
            return str(name.value)
        if isinstance(name, x509.IPAddress):
            return str(name.value)
    return "localhost"


class RelayWeb:
    """The front's application: `start` sets it up as a client of the relay's grpcio server on
    loopback (`root`: the CA to check it by; None: the system's) and answers the protocol
    factory the front door hands browsers' connections to, with `tls`, the relay's TLS pair
    for HTTP/1.1; `stop` closes both."""

    def __init__(self, cert_file: Path, key_file: Path, root: bytes | None, front_secret: str):
        self._front_secret = front_secret
        self._cert_file = cert_file
        self._root = root
        self._runner: web.AppRunner | None = None
        self._channel: grpc.aio.Channel | None = None
        self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.tls.load_cert_chain(cert_file, key_file)
        self.tls.set_alpn_protocols(["http/1.1"])

    async def start(self, grpc_port: int) -> Callable[[], asyncio.BaseProtocol]:
        self._channel = grpc.aio.secure_channel(
            f"127.0.0.1:{grpc_port}",
            grpc.ssl_channel_credentials(root_certificates=self._root),
            options=[
                ("grpc.ssl_target_name_override", certificate_name(self._cert_file.read_bytes())),
                ("grpc.max_send_message_length", frames.MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", frames.MAX_MESSAGE_BYTES),
            ],
        )
        app = web.Application()
        app[CHANNEL_KEY] = self._channel
        app[FRONT_SECRET] = self._front_secret
        app[FILES_KEY] = static_files()
        app.router.add_routes(ROUTES)
        app.on_response_prepare.append(_security_headers)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        assert self._runner.server is not None
        return self._runner.server

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._channel is not None:
            await self._channel.close()
