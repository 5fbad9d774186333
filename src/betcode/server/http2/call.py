"""One RPC on one HTTP/2 stream: requests in, the handler running, responses and status out.

Responses are appended to the call's outbound bytes and the connection writes whatever is
pending once per event-loop turn (connection.py): a handler that yields many events between
two waits has them leave in one socket write, and one event alone leaves at once. A handler
that gets too far ahead of the client (flow control, a full socket) waits in ``send_message``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import grpc
import grpc.aio

from betcode.server.http2.context import CallContext, MetadataItems
from betcode.server.http2.requests import RequestError, RequestStream
from betcode.server.http2.wire import (
    MESSAGE_PREFIX,
    Decompress,
    Header,
    MessageDeframer,
    MessageTooLarge,
    metadata_headers,
    status_headers,
)

log = logging.getLogger(__name__)

# A handler waits once its unsent responses pass this, until they are back under LOW_WATER.
HIGH_WATER_BYTES = 256 * 1024
LOW_WATER_BYTES = 64 * 1024
# Complete requests a handler has not read yet; past this the client's window is held back.
REQUEST_BUFFER_BYTES = 1024 * 1024

RESPONSE_HEADERS: list[Header] = [(b":status", b"200"), (b"content-type", b"application/grpc")]


class StreamChannel(Protocol):
    """What a call needs from its connection."""

    @property
    def paused(self) -> bool: ...

    def send_headers(self, stream_id: int, headers: list[Header], *, end_stream: bool) -> None: ...

    def want_flush(self, call: ServerCall) -> None: ...

    def acknowledge(self, stream_id: int, size: int) -> None: ...

    def consumed(self, size: int) -> None: ...

    def call_done(self, call: ServerCall) -> None: ...


class CallError(Exception):
    """Ends a call with this status (a rule of the wire broken by either side)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class ServerCall:
    def __init__(
        self,
        channel: StreamChannel,
        stream_id: int,
        handler: grpc.RpcMethodHandler,
        *,
        metadata: tuple[tuple[str, str | bytes], ...],
        peer: str,
        timeout: float | None,
        max_message_bytes: int,
        decompress: Decompress | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.stream_id = stream_id
        self._channel = channel
        self._handler = handler
        self._max_bytes = max_message_bytes
        self._decompress = decompress
        deadline = None if timeout is None else time.monotonic() + timeout
        self.context = CallContext(self, metadata, peer, deadline)
        self.requests = RequestStream(self._consumed)
        self._deserialize = handler.request_deserializer
        self._serialize = handler.response_serializer
        self._deframer = MessageDeframer(max_message_bytes)
        self._unacknowledged = 0
        self.outbound = bytearray()
        self.trailers: list[Header] | None = None
        self.drained = asyncio.Event()
        self._headers_sent = False
        self.requests_ended = False
        self.closed = False  # nothing more may be sent (status sent, or the peer reset)
        self.finished = False
        self.cancelled = False
        self._end_status: tuple[grpc.StatusCode, str] | None = None
        self._deadline_timer = (
            None if timeout is None else loop.call_later(timeout, self._deadline_passed)
        )
        self._task = loop.create_task(self._run())
        self._task.add_done_callback(self._handler_done)

    # ---- requests (called by the connection) ----

    @property
    def buffered_bytes(self) -> int:
        """Request bytes held for the handler: whole messages not yet read, and a partial one."""
        return self.requests.buffered_bytes + self._deframer.buffered_bytes

    def receive(self, data: bytes, flow_controlled: int) -> None:
        if self._end_status is None and not self.closed:
            try:
                for compressed, payload in self._messages(data):
                    self.requests.put(self._decoded(compressed, payload), len(payload))
            except CallError as error:
                self.end_with(error.code, error.details)
        if self._end_status is not None or self.requests.buffered_bytes < REQUEST_BUFFER_BYTES:
            self._acknowledge(flow_controlled)
        else:
            self._unacknowledged += flow_controlled

    def _messages(self, data: bytes) -> list[tuple[bool, bytes]]:
        try:
            return self._deframer.feed(data)
        except MessageTooLarge as error:
            raise CallError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)) from None

    def _decoded(self, compressed: bool, payload: bytes) -> Any:
        if compressed:
            if self._decompress is None:
                raise CallError(
                    grpc.StatusCode.INTERNAL, "a compressed message arrived without grpc-encoding"
                )
            try:
                payload = self._decompress(payload, self._max_bytes)
            except zlib.error as error:
                raise CallError(
                    grpc.StatusCode.INTERNAL, f"bad compressed message: {error}"
                ) from None
            except MessageTooLarge as error:
                raise CallError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)) from None
        if self._deserialize is None:
            return payload
        try:
            return self._deserialize(payload)
        except Exception:
            raise CallError(grpc.StatusCode.INTERNAL, "Exception deserializing request!") from None

    def _acknowledge(self, size: int) -> None:
        if size:
            self._channel.acknowledge(self.stream_id, size)

    def _consumed(self, size: int) -> None:
        self._channel.consumed(size)
        if self._unacknowledged and self.requests.buffered_bytes < REQUEST_BUFFER_BYTES:
            self._acknowledge(self._unacknowledged)
            self._unacknowledged = 0

    def end_of_requests(self) -> None:
        self.requests_ended = True
        if self._deframer.partial:
            self.end_with(grpc.StatusCode.INTERNAL, "the stream ended inside a message")
        self.requests.end()

    # ---- responses ----

    def send_initial_metadata(self, metadata: MetadataItems) -> None:
        if self._headers_sent:
            raise grpc.aio.UsageError("the call's initial metadata was already sent")
        self._send_headers(metadata_headers(metadata))

    def _send_headers(self, extra: list[Header] | None = None) -> None:
        self._headers_sent = True
        headers = RESPONSE_HEADERS + extra if extra else RESPONSE_HEADERS
        self._channel.send_headers(self.stream_id, headers, end_stream=False)

    def queue_message(self, message: Any) -> None:
        if self.closed:
            return  # the peer is gone; the handler's task is being cancelled
        data = message if self._serialize is None else self._serialize(message)
        if len(data) > self._max_bytes:
            raise CallError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Sent message larger than max ({len(data)} vs. {self._max_bytes})",
            )
        if not self._headers_sent:
            self._send_headers()
        outbound = self.outbound
        outbound += MESSAGE_PREFIX.pack(0, len(data))
        outbound += data
        self._channel.want_flush(self)

    async def send_message(self, message: Any) -> None:
        self.queue_message(message)
        if len(self.outbound) >= HIGH_WATER_BYTES or self._channel.paused:
            self.drained.clear()
            await self.drained.wait()

    # ---- the handler ----

    async def _run(self) -> None:
        try:
            await self._invoke()
        except asyncio.CancelledError:
            raise  # the done callback ends the call
        except Exception as error:
            self._complete(self._status_of(error))
            return
        self._complete((self.context.code() or grpc.StatusCode.OK, self.context.details() or ""))

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        # Also for a call ended before its task first ran (a bad first request): the
        # coroutine then never starts, so only a done callback sees it.
        if not self.finished:
            self._complete((grpc.StatusCode.CANCELLED, "the call was cancelled"))

    def _complete(self, status: tuple[grpc.StatusCode, str]) -> None:
        """Sends the status (in the same loop turn as the last response, so a unary answer
        leaves in one write), unless the client is gone."""
        self.finished = True
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self.context.run_done_callbacks()
        if self.cancelled:
            self._channel.call_done(self)
            return
        self._finish(*(self._end_status or status))

    def _status_of(self, error: Exception) -> tuple[grpc.StatusCode, str]:
        context = self.context
        if isinstance(error, grpc.aio.AbortError):
            return context.code() or grpc.StatusCode.UNKNOWN, context.details() or ""
        if isinstance(error, CallError):
            return error.code, error.details
        if isinstance(error, RequestError):
            return grpc.StatusCode.INTERNAL, str(error)
        log.error("a call on stream %d failed", self.stream_id, exc_info=error)
        return grpc.StatusCode.UNKNOWN, f"Unexpected {type(error)!r}: {error}"

    async def _invoke(self) -> None:
        handler, context = self._handler, self.context
        if handler.response_streaming:
            self._send_headers()  # headers first: see the module docstring of connection.py
        request: Any = self.requests
        if not handler.request_streaming:
            request = await self.requests.single()
        behaviour = _behaviour(handler)
        result = behaviour(request, context)
        if inspect.isasyncgen(result):
            async with contextlib.aclosing(result):
                async for response in result:
                    await self.send_message(response)
            return
        response = await result
        failed = (context.code() or grpc.StatusCode.OK) != grpc.StatusCode.OK
        if handler.response_streaming or failed:
            return
        if response is None:
            raise CallError(grpc.StatusCode.INTERNAL, "the method returned no response")
        self.queue_message(response)

    def _finish(self, code: grpc.StatusCode, details: str) -> None:
        trailers = status_headers(code, details, self.context.trailing_metadata())
        if not self._headers_sent:  # trailers-only: the whole answer is one HEADERS frame
            self._headers_sent = True
            self.closed = True
            self._channel.send_headers(self.stream_id, RESPONSE_HEADERS + trailers, end_stream=True)
            self._channel.call_done(self)
            return
        self.trailers = trailers
        self._channel.want_flush(self)

    # ---- ending early ----

    def end_with(self, code: grpc.StatusCode, details: str) -> None:
        """Stops the handler; the client gets this status (deadline, shutdown, bad request)."""
        if self.finished or self._end_status is not None:
            return
        self._end_status = code, details
        self._task.cancel()

    def _deadline_passed(self) -> None:
        self.end_with(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    def peer_gone(self) -> None:
        """The client reset the stream or the connection dropped: stop, send nothing."""
        self.cancelled = True
        self.closed = True
        if not self.finished:
            self._task.cancel()


def _behaviour(handler: grpc.RpcMethodHandler) -> Callable[..., Any]:
    behaviour: Callable[..., Any]
    if handler.request_streaming:
        behaviour = handler.stream_stream if handler.response_streaming else handler.stream_unary
    else:
        behaviour = handler.unary_stream if handler.response_streaming else handler.unary_unary
    return behaviour
