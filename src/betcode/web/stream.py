"""One WebSocket per session and browser tab: the web twin of a Converse stream.

`GET /api/sessions/{id}/stream?from=N&client=web-...` (an explicit `from`, the last sequence
the page has, 0 for the whole history): `Session.attach` replays what is stored after N, then
goes live, with no gap and no duplicate at the switch; an empty array marks the live edge.
Every server message is a JSON array of AgentEvents (`events`). What the page sends is an
AgentRequest in protobuf's JSON mapping (`{"message": {"content": "..."}}`, `{"cancel": {}}`,
`{}` as a heartbeat), handled by the very `ConverseRequests` that serves gRPC: input lock,
idempotency keys, the silence rule. A bad one is answered with an error event for this client
only (sequence 0) and the stream goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable

from aiohttp import WSMsgType, web
from google.protobuf import json_format

from betcode.core.errors import ErrorCode
from betcode.core.event_pump import BATCH_MAX_BYTES, OUTBOX_BATCHES, PER_EVENT_BATCH, pump_batches
from betcode.core.validation import invalid
from betcode.sessions import translate
from betcode.v1 import agent_pb2
from betcode.web.access import STREAM_SUBPROTOCOL, principal, via
from betcode.web.api import DOMAIN_KEY
from betcode.web.devices_api import DEVICES_KEY
from betcode.web.domain import WEB_CLIENT_TYPE, web_client_id

log = logging.getLogger(__name__)

FROM_PARAMETER = "from"
PING_SECONDS = 20.0  # a peer that stops answering pings (a phone gone to sleep) is closed
OPEN_SOCKETS_KEY = web.AppKey("open_sockets", set[web.WebSocketResponse])


def stream_routes() -> list[web.RouteDef]:
    return [web.get("/api/sessions/{session_id}/stream", stream)]


async def stream(request: web.Request) -> web.StreamResponse:
    domain = request.app[DOMAIN_KEY]
    after = _from_sequence(request)
    client_id = web_client_id(request)
    # Checked before the upgrade: an unknown session is a plain 404, not an open socket.
    session = await domain.session(request.match_info["session_id"], client_id)
    socket = web.WebSocketResponse(
        heartbeat=PING_SECONDS,
        max_msg_size=domain.max_payload_bytes,
        protocols=(STREAM_SUBPROTOCOL,),
    )
    await socket.prepare(request)
    who = principal(request)
    devices = request.app[DEVICES_KEY]
    await devices.seen(who)
    open_sockets = request.app[OPEN_SOCKETS_KEY]
    open_sockets.add(socket)
    outbox: asyncio.Queue[list[bytes] | None] = asyncio.Queue(OUTBOX_BATCHES)
    # A viewer: showing the session takes no input lock (its first input or a request does).
    attachment = session.attach(
        client_id,
        after,
        max_count=PER_EVENT_BATCH,
        max_bytes=BATCH_MAX_BYTES,
        viewer=True,
        mark_caught_up=True,
    )
    with (
        domain.clients.attached(client_id, session.id, WEB_CLIENT_TYPE),
        devices.connected(who, socket),
    ):
        tasks = [
            asyncio.create_task(pump_batches(attachment, outbox)),
            asyncio.create_task(
                domain.converse.serve(
                    session, client_id, _requests(socket, outbox), outbox, via=via(request)
                )
            ),
            asyncio.create_task(_send(socket, outbox, domain.events.batch)),
        ]
        try:
            # The page went away (its requests ended) or the stream ended (sent everything).
            await asyncio.wait(tasks[1:], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
            open_sockets.discard(socket)
            await socket.close()
    return socket


def _from_sequence(request: web.Request) -> int:
    text = request.query.get(FROM_PARAMETER)
    if text is None or not text.isdigit():
        raise invalid(
            f"`{FROM_PARAMETER}` is required: the last sequence the page has (0 for all), "
            f"got {text!r}"
        )
    return int(text)


async def _send(
    socket: web.WebSocketResponse,
    outbox: asyncio.Queue[list[bytes] | None],
    encode: Callable[[list[bytes]], str],
) -> None:
    while (batch := await outbox.get()) is not None:
        await socket.send_str(encode(batch))


async def _requests(
    socket: web.WebSocketResponse, outbox: asyncio.Queue[list[bytes] | None]
) -> AsyncIterator[agent_pb2.AgentRequest]:
    """The page's messages as AgentRequests, until it closes (a revoked device's stream is
    closed by `devices`); an unreadable one is answered here (an error event) and skipped."""
    async for message in socket:
        if message.type is not WSMsgType.TEXT:
            if message.type is WSMsgType.ERROR:
                log.info("web: stream closed: %s", socket.exception())
                return
            await outbox.put([_error("send AgentRequests as JSON text messages")])
            continue
        try:
            request = json_format.Parse(message.data, agent_pb2.AgentRequest())
        except (json_format.ParseError, json.JSONDecodeError) as error:
            await outbox.put([_error(f"not an AgentRequest in JSON: {error}")])
            continue
        if request.WhichOneof("request") == "start":
            await outbox.put([_error("the stream is already started: its URL names the session")])
            continue
        yield request


def _error(message: str) -> bytes:
    """An error for this client only: not stored, not sequenced (sequence 0)."""
    return translate.error_event(ErrorCode.INVALID_REQUEST, message).SerializeToString()
