"""Refusals as HTTP statuses: the same codes and messages a gRPC client gets, mapped from the
gRPC status of each code, in one JSON shape: `{"error": {"code": ..., "message": ...}}`."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from aiohttp import web

from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.validation import domain_error, invalid

log = logging.getLogger(__name__)

HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}

MAX_PAYLOAD_KEY = web.AppKey("max_payload_bytes", int)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def refusal(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


def error_response(error: BetCodeError) -> web.Response:
    return refusal(HTTP_STATUS.get(error.status, 500), error.code.value, error.message)


@web.middleware
async def translate_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A BetCodeError or a domain refusal becomes its status and JSON body; anything else is a
    bug: 500, logged."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:
        error = exc if isinstance(exc, BetCodeError) else domain_error(exc)
        if error is None:
            log.exception("web: %s %s failed", request.method, request.path)
            error = BetCodeError(ErrorCode.INTERNAL, f"the daemon failed the request: {exc}")
        return error_response(error)


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; a body over the payload limit is 413, anything that is not
    a JSON object is INVALID_REQUEST (400)."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[MAX_PAYLOAD_KEY]
        message = f"the request body is over the daemon's payload limit ({limit} bytes)"
        body = {"error": {"code": "PAYLOAD_TOO_LARGE", "message": message}}
        raise web.HTTPRequestEntityTooLarge(
            max_size=limit,
            actual_size=request.content_length or 0,
            text=json.dumps(body),
            content_type="application/json",
        ) from None
    try:
        body = json.loads(raw or b"{}")
    except ValueError as error:
        raise invalid(f"the request body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    return body


def text_field(body: dict[str, Any], name: str) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string")
    return value
