"""Application errors as aborted gRPC calls.

A service method decorated with ``@handles_errors`` (unary or streaming) turns a raised
``BetCodeError`` (core/errors.py) into an aborted call with the code's status, its message, and
the code and details as trailing metadata, so services stay thin.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar, cast

import grpc

from betcode.core.errors import BetCodeError


async def abort(
    context: grpc.aio.ServicerContext, status: grpc.StatusCode, message: str
) -> NoReturn:
    """``context.abort`` with the NoReturn type it has at runtime."""
    await context.abort(status, message)
    raise AssertionError("grpc.aio context.abort() returned")


async def abort_with(context: grpc.aio.ServicerContext, error: BetCodeError) -> NoReturn:
    """Ends the RPC with the error's status, message, code and details."""
    context.set_trailing_metadata(error.trailing_metadata())
    await abort(context, error.status, error.message)


Handler = TypeVar("Handler", bound=Callable[..., Any])
ErrorTranslator = Callable[[Exception], "BetCodeError | None"]


def _untranslated(exc: Exception) -> BetCodeError | None:
    return None


def handles_errors(handler: Handler) -> Handler:
    """Decorates a servicer method ``(self, request, context)``, ``async def`` or async
    generator: a ``BetCodeError`` it raises aborts the call with the mapped status."""
    return translates_errors(_untranslated)(handler)


def translates_errors(translate: ErrorTranslator) -> Callable[[Handler], Handler]:
    """Like ``handles_errors``; besides, an exception that ``translate`` maps to a
    ``BetCodeError`` (a domain refusal) aborts the call the same way. Anything else
    propagates (grpc reports it as UNKNOWN: a bug)."""

    def error_for(exc: Exception) -> BetCodeError | None:
        return exc if isinstance(exc, BetCodeError) else translate(exc)

    def decorate(handler: Handler) -> Handler:
        if inspect.isasyncgenfunction(handler):

            @functools.wraps(handler)
            async def stream(*args: Any) -> AsyncIterator[Any]:
                # aclosing: the handler's own clean-up (detaching from a session) runs as soon
                # as the call ends, not whenever the abandoned generator is collected.
                async with contextlib.aclosing(handler(*args)) as responses:
                    try:
                        async for response in responses:
                            yield response
                    except Exception as exc:
                        if (error := error_for(exc)) is None:
                            raise
                        await abort_with(args[-1], error)

            return cast(Handler, stream)
        if not inspect.iscoroutinefunction(handler):
            raise TypeError(f"{handler.__qualname__} must be `async def` to be served")
        unary = cast(Callable[..., Awaitable[Any]], handler)

        @functools.wraps(handler)
        async def call(*args: Any) -> Any:
            try:
                return await unary(*args)
            except Exception as exc:
                if (error := error_for(exc)) is None:
                    raise
                await abort_with(args[-1], error)

        return cast(Handler, call)

    return decorate
