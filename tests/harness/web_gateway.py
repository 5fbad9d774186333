"""A client of the daemon's WebGatewayService, as the web client uses it through the relay: the
page's HTTP requests as Fetch calls and its session streams as Socket calls, on any channel
(the daemon's own socket, or the relay's sealed by `EncryptingChannel`). A stream is a
`harness.web.WebStream` over `GatewaySocket`, so tests read it as they read a LAN one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import grpc

from betcode.v1 import web_gateway_pb2, web_gateway_pb2_grpc
from harness.web import ApiClient, WebStream

Metadata = Sequence[tuple[str, str]]


class GatewayClient(ApiClient):
    def __init__(
        self,
        channel: Any,
        credential: str,
        client_id: str = "web-gateway",
        metadata: Metadata = (),
    ) -> None:
        self.stub = web_gateway_pb2_grpc.WebGatewayServiceStub(channel)
        self.credential = credential
        self.client_id = client_id
        self.metadata = tuple(metadata)

    def headers(self, **extra: str) -> dict[str, str]:
        given = {"x-betcode-client": self.client_id, "content-type": "application/json"}
        if self.credential:
            given["authorization"] = f"Bearer {self.credential}"
        return {**given, **extra}

    async def fetch(
        self, method: str, path: str, body: object = None, **headers: str
    ) -> web_gateway_pb2.WebResponse:
        request = web_gateway_pb2.WebRequest(
            method=method,
            path=path,
            headers=self.headers(**headers),
            body=b"" if body is None else json.dumps(body).encode(),
        )
        answer: web_gateway_pb2.WebResponse = await self.stub.Fetch(request, metadata=self.metadata)
        return answer

    async def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        """Like `harness.web.WebClient.call`: the status and the JSON body."""
        answer = await self.fetch(method, path, body)
        return answer.status, json.loads(answer.body) if answer.body else None

    async def stream(self, session_id: str, after: int = 0) -> WebStream:
        path = f"/api/sessions/{session_id}/stream?from={after}&client={self.client_id}"
        protocols = ["betcode", f"bearer.{self.credential}"]
        return WebStream(GatewaySocket(self.stub, path, protocols, self.metadata))


class GatewaySocket:
    """The part of aiohttp's client WebSocket that WebStream uses, over one Socket call."""

    def __init__(self, stub: Any, path: str, protocols: list[str], metadata: Metadata) -> None:
        self._outgoing: asyncio.Queue[web_gateway_pb2.WebSocketFrame | None] = asyncio.Queue()
        opening = web_gateway_pb2.WebSocketOpen(path=path, protocols=protocols)
        self._outgoing.put_nowait(web_gateway_pb2.WebSocketFrame(open=opening))
        self.call = stub.Socket(self._frames(), metadata=metadata)
        self.close_code: int | None = None
        self.close_reason = ""

    async def _frames(self) -> AsyncIterator[web_gateway_pb2.WebSocketFrame]:
        while (frame := await self._outgoing.get()) is not None:
            yield frame

    async def __aiter__(self) -> AsyncIterator[aiohttp.WSMessage]:
        try:
            async for frame in self.call:
                kind = frame.WhichOneof("frame")
                if kind == "text":
                    yield aiohttp.WSMessage(aiohttp.WSMsgType.TEXT, frame.text, None)
                elif kind == "binary":
                    yield aiohttp.WSMessage(aiohttp.WSMsgType.BINARY, frame.binary, None)
                elif kind == "close":
                    self.close_code, self.close_reason = frame.close.code, frame.close.reason
                    return
        except grpc.aio.AioRpcError:
            if self.close_code is None:
                raise

    async def send_str(self, text: str) -> None:
        self._outgoing.put_nowait(web_gateway_pb2.WebSocketFrame(text=text))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        closing = web_gateway_pb2.WebSocketClose(code=code, reason=reason)
        self._outgoing.put_nowait(web_gateway_pb2.WebSocketFrame(close=closing))
        self._outgoing.put_nowait(None)
