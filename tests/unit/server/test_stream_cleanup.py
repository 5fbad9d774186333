"""A streaming servicer method's clean-up runs when its call ends, not at garbage collection."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from betcode.server.errors import handles_errors


class Streaming:
    def __init__(self) -> None:
        self.cleaned_up = False

    @handles_errors
    async def Watch(self, request: Any, context: Any) -> AsyncGenerator[int, None]:
        try:
            yield 1
            yield 2
        finally:
            self.cleaned_up = True  # e.g. detaching from a session


async def test_ending_the_call_runs_the_handlers_finally_at_once() -> None:
    service = Streaming()
    call = service.Watch(None, None)
    assert await anext(call) == 1
    await call.aclose()  # grpc.aio ends the call (client gone)
    assert service.cleaned_up
