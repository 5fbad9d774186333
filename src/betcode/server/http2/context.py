"""The ``grpc.aio.ServicerContext`` a handler gets: the servicers are written for grpc.aio and
run unchanged on this transport."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, NoReturn, Protocol

import grpc
import grpc.aio

from betcode.server.http2.wire import Metadata

MetadataItems = Sequence[tuple[str, str | bytes]]


class ContextCall(Protocol):
    """What the context needs of its call (call.ServerCall)."""

    requests: AsyncIterator[Any]
    cancelled: bool
    finished: bool

    async def send_message(self, message: Any) -> None: ...

    def send_initial_metadata(self, metadata: MetadataItems) -> None: ...


class CallContext(grpc.aio.ServicerContext):  # type: ignore[misc]  # grpc.aio is untyped
    def __init__(
        self, call: ContextCall, metadata: Metadata, peer: str, deadline: float | None
    ) -> None:
        self._call = call
        self._metadata = metadata
        self._peer = peer
        self._deadline = deadline  # time.monotonic() seconds
        self._code: grpc.StatusCode | None = None
        self._details: str | None = None
        self._trailing: MetadataItems = ()
        self._done_callbacks: list[Callable[[CallContext], None]] = []

    # ---- the call as the client sent it ----

    def invocation_metadata(self) -> Metadata:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def peer_identities(self) -> None:
        return None  # no TLS on the daemon's own sockets

    def peer_identity_key(self) -> None:
        return None

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    # ---- messages ----

    async def read(self) -> Any:
        return await anext(self._call.requests, grpc.aio.EOF)

    async def write(self, message: Any) -> None:
        await self._call.send_message(message)

    async def send_initial_metadata(self, initial_metadata: MetadataItems) -> None:
        self._call.send_initial_metadata(initial_metadata)

    # ---- status ----

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def set_details(self, details: str) -> None:
        self._details = details

    def details(self) -> str | None:
        return self._details

    def set_trailing_metadata(self, trailing_metadata: MetadataItems) -> None:
        self._trailing = tuple(trailing_metadata)

    def trailing_metadata(self) -> MetadataItems:
        return self._trailing

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: MetadataItems = ()
    ) -> NoReturn:
        if code == grpc.StatusCode.OK:
            raise ValueError("abort() needs a status other than OK")
        self._code, self._details = code, details
        if trailing_metadata:
            self._trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    async def abort_with_status(self, status: Any) -> NoReturn:
        await self.abort(status.code, status.details, status.trailing_metadata)

    # ---- compression: responses are never compressed ----

    def set_compression(self, compression: Any) -> None:
        pass

    def disable_next_message_compression(self) -> None:
        pass

    # ---- the call's end ----

    def cancelled(self) -> bool:
        return self._call.cancelled

    def done(self) -> bool:
        return self._call.finished

    def add_done_callback(self, callback: Callable[[CallContext], None]) -> None:
        self._done_callbacks.append(callback)

    def run_done_callbacks(self) -> None:
        callbacks, self._done_callbacks = self._done_callbacks, []
        for callback in callbacks:
            callback(self)
