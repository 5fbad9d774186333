"""The request messages of one call, in arrival order, as its handler reads them."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any


class RequestError(Exception):
    """The client broke the call's request rules (a unary call without exactly one message)."""


class RequestStream:
    """An async iterator of a call's requests that ends when the client half-closes.

    ``on_consumed(size)`` is told the wire size of each message the handler takes, so the call
    can give the client back its flow-control window only as fast as the handler reads.
    """

    def __init__(self, on_consumed: Callable[[int], None]) -> None:
        self._items: deque[tuple[Any, int]] = deque()
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None
        self._on_consumed = on_consumed
        self.buffered_bytes = 0

    def put(self, message: Any, size: int) -> None:
        self._items.append((message, size))
        self.buffered_bytes += size
        self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _arrival(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> Any:
        while not self._items:
            if self._ended:
                raise StopAsyncIteration
            await self._arrival()
        message, size = self._items.popleft()
        self.buffered_bytes -= size
        self._on_consumed(size)
        return message

    async def single(self) -> Any:
        """The one request of a unary-request call, once the client has half-closed."""
        message = await anext(self, None)
        if message is None:
            raise RequestError("the call ended without its request message")
        while not (self._ended or self._items):
            await self._arrival()
        if self._items:
            raise RequestError("a unary call carried more than one request message")
        return message
