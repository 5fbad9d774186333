"""WebGatewayService: the web client's HTTP API and stream WebSocket as gRPC calls, so that a
browser reaches them through the relay, sealed end to end like any other call.

Each call is made again as a real HTTP request or WebSocket to the daemon's own web app on its
private gateway socket (`<daemon socket>.web`, owner-only), where the web handlers serve it with
every rule of the LAN page (device credentials, the input lock, idempotency, the silence rule);
arriving on that socket is what marks a request relayed (`betcode.web.access.is_relayed`), so
no owner or loopback trust applies to it. Only `/api/` paths are served, only the headers in
`FORWARDED_HEADERS` are passed on, and a body is at most `MAX_BODY_BYTES`. The handler's HTTP
status, refusals included, is the answer's `status`; gRPC errors are kept for what is wrong
with the call itself (INVALID_ARGUMENT) and for a web app that cannot be reached
(UNAVAILABLE). A WebSocket refused at its handshake is closed with `4000 + its HTTP status`
(4401: not signed in).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import aiohttp
import grpc
from yarl import URL

from betcode.remote.frames import RELAY_DEVICE_METADATA, RELAYED_METADATA
from betcode.server.errors import abort
from betcode.v1 import web_gateway_pb2

log = logging.getLogger(__name__)

API_PREFIX = "/api/"
FORWARDED_HEADERS = frozenset({"authorization", "content-type", "x-betcode-client", "accept"})
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
MAX_BODY_BYTES = 16 * 1024 * 1024
# Answer headers that describe the hop to the gateway, not the answer the browser gets.
HOP_HEADERS = frozenset({"connection", "content-length", "keep-alive", "transfer-encoding"})
HANDSHAKE_REFUSED = 4000  # + the HTTP status of a WebSocket refused at its handshake
CONNECT_SECONDS = 5.0
GOING_AWAY = 1001


class WebGatewayService:
    def __init__(self, gateway_socket: Path) -> None:
        self._socket = gateway_socket
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use: a ClientSession belongs to the running event loop.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                # No pool limit: each open Socket holds a connection for as long as it lasts,
                # so a limit would leave the next page's stream waiting for one.
                connector=aiohttp.UnixConnector(path=str(self._socket), limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS),
                auto_decompress=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def Fetch(
        self, request: web_gateway_pb2.WebRequest, context: grpc.aio.ServicerContext
    ) -> web_gateway_pb2.WebResponse:
        method = request.method.upper()
        if method not in METHODS:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"method {request.method!r} is not one of {', '.join(sorted(METHODS))}",
            )
        url = await _api_url(request.path, context)
        if len(request.body) > MAX_BODY_BYTES:
            await _too_large(context, "a request body")
        try:
            async with self._client().request(
                method,
                url,
                headers=await _forwarded(request.headers, context),
                data=request.body if request.body else None,
                allow_redirects=False,
            ) as answer:
                body = await answer.content.read(MAX_BODY_BYTES + 1)
                if len(body) > MAX_BODY_BYTES:
                    await _too_large(context, "the answer's body")
                return web_gateway_pb2.WebResponse(
                    status=answer.status,
                    headers={
                        name.lower(): value
                        for name, value in answer.headers.items()
                        if name.lower() not in HOP_HEADERS
                    },
                    body=body,
                )
        except aiohttp.ClientConnectionError as error:
            await _unreachable(context, error)

    async def Socket(
        self,
        frames: AsyncIterator[web_gateway_pb2.WebSocketFrame],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[web_gateway_pb2.WebSocketFrame]:
        incoming = aiter(frames)
        first = await anext(incoming, None)
        if first is None or first.WhichOneof("frame") != "open":
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "the first frame of Socket must be `open`",
            )
        url = await _api_url(first.open.path, context)
        for protocol in first.open.protocols:
            await _no_control_characters("a subprotocol", protocol, context)
        try:
            socket = await self._client().ws_connect(
                url,
                protocols=tuple(first.open.protocols),
                headers=await _forwarded(first.open.headers, context),
                max_msg_size=MAX_BODY_BYTES,
                autoping=True,
                compress=0,  # deflate on a local socket would only cost CPU
            )
        except aiohttp.WSServerHandshakeError as refused:
            yield _close(HANDSHAKE_REFUSED + refused.status, refused.message)
            return
        except aiohttp.ClientConnectionError as error:
            await _unreachable(context, error)
        client = _ClientSide()
        forward = asyncio.create_task(_to_socket(incoming, socket, client))
        try:
            async for frame in _from_socket(socket, client):
                yield frame
        finally:
            forward.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await forward
            await socket.close()
        if client.problem:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, client.problem)


async def _api_url(path: str, context: grpc.aio.ServicerContext) -> URL:
    """The web app's URL for a path and query the page would use; INVALID_ARGUMENT for anything
    that is not a plain `/api/` path (another origin, a fragment, `..`)."""
    try:
        given = URL(path)
    except ValueError:
        given = URL()
    segments = given.path.split("/")
    if (
        given.is_absolute()
        or not path.startswith(API_PREFIX)
        or not given.path.startswith(API_PREFIX)
        or given.fragment
        or ".." in segments
        or "." in segments
    ):
        await abort(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            f"only {API_PREFIX} paths of the web client are served, not {path!r}",
        )
    # The Host a loopback web app accepts; the socket, not the name, says where it goes.
    return (
        URL("http://localhost")
        .with_path(given.raw_path, encoded=True)
        .with_query(given.raw_query_string)
    )


async def _forwarded(
    headers: Mapping[str, str], context: grpc.aio.ServicerContext
) -> dict[str, str]:
    """The headers passed on (FORWARDED_HEADERS); INVALID_ARGUMENT for a value that would split
    the request (a line break or any other control character)."""
    kept = {name.lower(): value for name, value in headers.items()}
    kept = {name: value for name, value in kept.items() if name in FORWARDED_HEADERS}
    # The relay's word on which paired device login calls (never the page's: only this
    # gateway sets the header on its private socket), for pairing to record (docs/RELAY.md).
    metadata = dict(context.invocation_metadata() or ())
    device = metadata.get(RELAY_DEVICE_METADATA)
    if RELAYED_METADATA in metadata and isinstance(device, str):
        kept[RELAY_DEVICE_METADATA] = device
    for name, value in kept.items():
        await _no_control_characters(f"header {name!r}", value, context)
    return kept


async def _no_control_characters(what: str, value: str, context: grpc.aio.ServicerContext) -> None:
    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in value):
        await abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"{what} holds a control character")


@dataclass
class _ClientSide:
    """How the client ended its side: the close it sent, or what was wrong with its frames."""

    closed_with: web_gateway_pb2.WebSocketFrame | None = None
    problem: str = ""


async def _to_socket(
    incoming: AsyncIterator[web_gateway_pb2.WebSocketFrame],
    socket: aiohttp.ClientWebSocketResponse,
    client: _ClientSide,
) -> None:
    """The client's frames to the web app; its half-close or `close` closes the socket. A frame
    that comes after the web app closed it goes nowhere (its close is on its way back)."""
    code: int = aiohttp.WSCloseCode.OK
    reason = ""
    try:
        async for frame in incoming:
            kind = frame.WhichOneof("frame")
            if kind == "text":
                await socket.send_str(frame.text)
            elif kind == "binary":
                await socket.send_bytes(frame.binary)
            elif kind == "close":
                code, reason = _sendable_close(frame.close.code), frame.close.reason
                break
            else:
                client.problem = "only the first frame of Socket is `open`"
                code, reason = aiohttp.WSCloseCode.POLICY_VIOLATION, client.problem
                break
    except ConnectionResetError:
        return
    client.closed_with = _close(code, reason)
    await socket.close(code=code, message=reason.encode())


def _sendable_close(code: int) -> int:
    """A close code a peer may send (RFC 6455 7.4): 1000, the registered 3000-3999 and the
    private 4000-4999; anything else (1005 and 1006 are never sent) is a normal close."""
    return code if 3000 <= code <= 4999 else aiohttp.WSCloseCode.OK


async def _from_socket(
    socket: aiohttp.ClientWebSocketResponse, client: _ClientSide
) -> AsyncIterator[web_gateway_pb2.WebSocketFrame]:
    """The web app's messages, then its close (code and reason) as the last frame; when the
    client closed first, its own close comes back (as a WebSocket peer echoes it)."""
    while True:
        message = await socket.receive()
        if message.type is aiohttp.WSMsgType.TEXT:
            yield web_gateway_pb2.WebSocketFrame(text=message.data)
        elif message.type is aiohttp.WSMsgType.BINARY:
            yield web_gateway_pb2.WebSocketFrame(binary=message.data)
        elif message.type is aiohttp.WSMsgType.CLOSE:
            yield _close(message.data, message.extra or "")
            return
        else:  # closed by us (the client's close), or the connection failed
            yield client.closed_with or _close(socket.close_code or GOING_AWAY, "")
            return


def _close(code: int, reason: str) -> web_gateway_pb2.WebSocketFrame:
    return web_gateway_pb2.WebSocketFrame(
        close=web_gateway_pb2.WebSocketClose(code=code, reason=reason)
    )


async def _too_large(context: grpc.aio.ServicerContext, what: str) -> NoReturn:
    await abort(
        context,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"{what} through the web gateway is at most {MAX_BODY_BYTES} bytes",
    )


async def _unreachable(context: grpc.aio.ServicerContext, error: Exception) -> NoReturn:
    log.warning("web gateway: the web app did not answer: %s", error)
    await abort(
        context, grpc.StatusCode.UNAVAILABLE, f"the daemon's web app did not answer: {error}"
    )
