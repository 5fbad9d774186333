"""translates_errors: domain refusals end a call like BetCodeErrors do; bugs are not disguised."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from betcode.core.errors import BetCodeError, ErrorCode
from betcode.server.errors import translates_errors


class Refused(Exception):
    """A domain refusal."""


def translate(exc: Exception) -> BetCodeError | None:
    if isinstance(exc, Refused):
        return BetCodeError(ErrorCode.SESSION_NOT_FOUND, f"no such thing: {exc}", {"id": "x"})
    return None


class Aborted(Exception):
    pass


class Context:
    """What the decorator uses of grpc.aio.ServicerContext."""

    def __init__(self) -> None:
        self.trailing: tuple[tuple[str, str | bytes], ...] = ()

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str | bytes], ...]) -> None:
        self.trailing = metadata

    async def abort(self, status: grpc.StatusCode, message: str) -> None:
        raise Aborted(status, message)


class Service:
    @translates_errors(translate)
    async def Unary(self, request: Exception, context: Any) -> str:
        raise request

    @translates_errors(translate)
    async def Stream(self, request: Exception, context: Any) -> AsyncIterator[str]:
        yield "first"
        raise request


async def test_a_refusal_aborts_a_unary_call_with_its_status() -> None:
    context = Context()
    with pytest.raises(Aborted) as aborted:
        await Service().Unary(Refused("s1"), context)
    assert aborted.value.args == (grpc.StatusCode.NOT_FOUND, "no such thing: s1")
    assert ("betcode-error-code", "SESSION_NOT_FOUND") in context.trailing


async def test_a_refusal_aborts_a_stream_after_what_it_sent() -> None:
    stream = Service().Stream(Refused("s2"), Context())
    assert await anext(stream) == "first"
    with pytest.raises(Aborted) as aborted:
        await anext(stream)
    assert aborted.value.args[0] == grpc.StatusCode.NOT_FOUND


async def drain(call: AsyncIterator[str]) -> None:
    async for _ in call:
        pass


async def test_an_untranslated_exception_propagates() -> None:
    with pytest.raises(KeyError):
        await Service().Unary(KeyError("bug"), Context())
    with pytest.raises(KeyError):
        await drain(Service().Stream(KeyError("bug"), Context()))
