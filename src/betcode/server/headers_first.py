"""Response headers first on grpc.aio's server (daemon.grpc.server = "grpcio"): every streaming
call sends its initial metadata when it is accepted, as BetCode's own transport does.

grpc.aio sends a call's headers with its first response. A bidirectional call whose server
reads a request before it answers (Converse waits for `start`) then sends nothing at all until
the client writes, while a client that waits for the headers before it writes (tonic does)
waits too: both sit until the client's deadline. Sending the headers up front, for every
streaming method of every service, is what gRPC servers in other stacks do.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio


class HeadersFirst(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc.aio is untyped
    """Wraps each response-streaming handler so its headers go out before it starts."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not handler.response_streaming:
            return handler
        if handler.request_streaming:
            return handler._replace(stream_stream=headers_first(handler.stream_stream))
        return handler._replace(unary_stream=headers_first(handler.unary_stream))


def headers_first(behaviour: Callable[..., Any]) -> Callable[..., Any]:
    """`behaviour` (an async generator, or a coroutine that writes with `context.write`),
    sending the call's initial metadata before it runs."""
    if inspect.isasyncgenfunction(behaviour):

        async def stream(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            await context.send_initial_metadata(())
            async for response in behaviour(request, context):
                yield response

        return stream

    async def write(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.send_initial_metadata(())
        return await behaviour(request, context)

    return write
