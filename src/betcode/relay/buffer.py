"""Requests for a machine that is offline, kept in JetStream until it returns (TOP-05).

One stream per user holds the buffered calls of that user's machines, one subject per machine,
so the engine itself enforces the per-machine cap (``max_msgs_per_subject`` with "discard
new": the request beyond it is refused, RESOURCE_EXHAUSTED + BUFFER_FULL), the per-user caps
(``max_msgs`` and ``max_bytes``: RESOURCE_EXHAUSTED + BUFFER_QUOTA) and the TTL
(``max_age``). A buffered call is
the caller's whole request (one message, or the few messages of a Converse the caller
half-closed) with its method, metadata and a priority; when the machine's tunnel opens, the
relay holding it delivers them in priority order (FIFO within a priority) and deletes each once
the daemon answered. An answer that says the call could not be taken now (the tunnel or the
daemon went away, the daemon is stopping or busy) keeps it, and the delivery is tried again with
backoff while the tunnel is open, up to the buffer's TTL; any other answer, a refusal included,
is final. The caller is told UNAVAILABLE with ``x-betcode-buffered`` (its place) in the
trailers: the call has not run yet."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import nats.errors
import nats.js.errors
from nats.aio.client import Client as Nats
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from betcode.relay.accounts import Accounts, DroppedRequest
from betcode.relay.auth_service import abort
from betcode.remote import frames
from betcode.remote.e2e import UNKNOWN_SESSION
from betcode.remote.frames import BUFFERED_TRAILER
from betcode.v1 import tunnel_pb2

log = logging.getLogger(__name__)

STREAM_PREFIX = "BETCODE_BUFFER_"
PRIORITY_HEADER = "betcode-priority"
METHOD_HEADER = "betcode-method"
METADATA_HEADER = "betcode-metadata"
ERROR_CODE_TRAILER = "betcode-error-code"
BUFFER_FULL = "BUFFER_FULL"
BUFFER_QUOTA = "BUFFER_QUOTA"
MAX_MESSAGES_PER_CALL = 16
# Answers that mean "not now": the call stays buffered and is delivered again.
RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.ABORTED,
    }
)
DELIVERY_TIMEOUT_SECONDS = 60.0
STREAM_READY_SECONDS = 30.0
HALF_CLOSE_WAIT_SECONDS = 2.0

# TOP-05: permission answers, cancels, user messages, session control, heartbeats.
PRIORITY_OF_METHOD = {
    "betcode.v1.AgentService/AnswerPermission": 0,
    "betcode.v1.AgentService/CancelTurn": 1,
    "betcode.v1.AgentService/Converse": 2,
    "betcode.v1.AgentService/CompactSession": 3,
    "betcode.v1.AgentService/RenameSession": 3,
    "betcode.v1.AgentService/DeleteSession": 3,
    "betcode.v1.AgentService/MoveSession": 3,
    "betcode.v1.AgentService/SetSessionGrant": 3,
    "betcode.v1.AgentService/ClearSessionGrants": 3,
}


@dataclass(frozen=True)
class BufferSettings:
    ttl_seconds: float = 24 * 3600.0  # a day: the shorter of the two values upstream documents
    max_per_machine: int = 1000
    max_message_bytes: int = 1024 * 1024
    max_per_user: int = 2000  # requests, over all of a user's machines
    max_bytes_per_user: int = 64 * 1024 * 1024
    retry_initial_seconds: float = 1.0  # a delivery answered "not now" is tried again after
    retry_max_seconds: float = 300.0  # this, doubling up to this


def stream_name(user_id: str) -> str:
    return STREAM_PREFIX + user_id


def buffer_subject(user_id: str, machine_id: str) -> str:
    return f"betcode.held.{user_id}.{machine_id}"


def pack(messages: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


def unpack(data: bytes) -> list[bytes]:
    messages, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from(">I", data, offset)
        messages.append(data[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return messages


class OfflineBuffer:
    def __init__(self, nc: Nats, settings: BufferSettings, accounts: Accounts) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self.settings = settings
        self._accounts = accounts
        # One delivery per machine at a time; a new tunnel's waits for the old one's to end.
        self._delivering: dict[str, asyncio.Lock] = {}
        self._streams: set[str] = set()  # the users whose stream this instance has set up

    def _config(self, user_id: str) -> StreamConfig:
        return StreamConfig(
            name=stream_name(user_id),
            subjects=[buffer_subject(user_id, ">")],
            storage=StorageType.FILE,
            max_age=self.settings.ttl_seconds,
            max_msgs_per_subject=self.settings.max_per_machine,
            max_msgs=self.settings.max_per_user,
            max_bytes=self.settings.max_bytes_per_user,
            discard=DiscardPolicy.NEW,
            discard_new_per_subject=True,
            max_msg_size=self.settings.max_message_bytes + 64 * 1024,
        )

    async def start(self) -> None:
        """Waits until JetStream answers (a NATS cluster that has just started elects its
        JetStream leader first)."""
        await self._retrying(self._js.account_info)

    async def _retrying(self, action: Callable[[], Awaitable[object]]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STREAM_READY_SECONDS
        while True:
            try:
                await action()
                return
            except (
                nats.js.errors.ServiceUnavailableError,
                nats.js.errors.ServerError,
                nats.js.errors.NoStreamResponseError,
                nats.errors.TimeoutError,
            ):
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def _ensure_stream(self, user_id: str) -> None:
        if user_id in self._streams:
            return
        config = self._config(user_id)

        async def add_or_update() -> None:
            try:
                await self._js.add_stream(config)
            except nats.js.errors.BadRequestError:
                await self._js.update_stream(config)  # made before, other settings

        await self._retrying(add_or_update)
        self._streams.add(user_id)

    async def buffer_call(
        self,
        user_id: str,
        machine_id: str,
        method: str,
        metadata: dict[str, str],
        requests: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext,
    ) -> bool:
        """Keeps the call for later and answers the caller; False for a method that is not
        buffered (the caller gets the plain "offline" error)."""
        priority = PRIORITY_OF_METHOD.get(method)
        if priority is None:
            return False
        messages = await self._whole_request(requests)
        if messages is None:
            return False  # a live stream (e.g. a chat reconnecting): "offline", it retries
        body = pack(messages)
        if len(body) > self.settings.max_message_bytes:
            await abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"a buffered request is limited to {self.settings.max_message_bytes} bytes",
            )
        headers = {
            PRIORITY_HEADER: str(priority),
            METHOD_HEADER: method,
            METADATA_HEADER: json.dumps(metadata),
        }
        await self._ensure_stream(user_id)
        try:
            ack = await self._js.publish(buffer_subject(user_id, machine_id), body, headers=headers)
        except nats.js.errors.APIError as error:
            await self._refuse_full(context, machine_id, error.description or "")
            raise AssertionError from None
        context.set_trailing_metadata(((BUFFERED_TRAILER, str(ack.seq)),))
        await abort(
            context,
            grpc.StatusCode.UNAVAILABLE,
            f"machine {machine_id} is offline; the request is buffered and will be delivered "
            "when it returns",
        )
        return True

    async def _refuse_full(
        self, context: grpc.aio.ServicerContext, machine_id: str, description: str
    ) -> None:
        """RESOURCE_EXHAUSTED saying which cap it hit: the machine's or the user's."""
        settings = self.settings
        if "per subject" in description:
            code = BUFFER_FULL
            why = (
                f"machine {machine_id} is offline and its buffer is full "
                f"({settings.max_per_machine} requests)"
            )
        else:
            code = BUFFER_QUOTA
            why = (
                f"machine {machine_id} is offline and your buffered requests reached this "
                f"relay's quota ({settings.max_per_user} requests, "
                f"{settings.max_bytes_per_user} bytes per user, over all your machines)"
            )
        context.set_trailing_metadata(((ERROR_CODE_TRAILER, code),))
        await abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, f"{why}: {description}")

    @staticmethod
    async def _whole_request(requests: AsyncIterator[bytes]) -> list[bytes] | None:
        """The caller's messages once it half-closed; None when it does not do so soon with
        at most MAX_MESSAGES_PER_CALL messages (it holds a live stream open instead)."""
        messages: list[bytes] = []

        async def collect() -> None:
            async for message in requests:
                messages.append(message)
                if len(messages) > MAX_MESSAGES_PER_CALL:
                    raise OverflowError

        try:
            await asyncio.wait_for(collect(), HALF_CLOSE_WAIT_SECONDS)
        except (TimeoutError, OverflowError):
            return None
        return messages

    async def pending(self, machine_id: str) -> list[Any]:
        """The machine's buffered calls, in delivery order (priority, then arrival)."""
        machine = await self._accounts.machine(machine_id)
        if machine is None:
            return []
        await self._ensure_stream(machine.owner_id)
        subscription = await self._js.pull_subscribe(
            buffer_subject(machine.owner_id, machine_id), stream=stream_name(machine.owner_id)
        )
        found: list[Any] = []
        try:
            while True:
                try:
                    batch = await subscription.fetch(100, timeout=0.5)
                except (nats.errors.TimeoutError, TimeoutError):
                    break
                found += batch
                if len(batch) < 100:
                    break
        finally:
            await subscription.unsubscribe()
        return sorted(
            found,
            key=lambda m: (
                int((m.headers or {}).get(PRIORITY_HEADER, 9)),
                m.metadata.sequence.stream,
            ),
        )

    async def deliver(self, machine_id: str, tunnel: Any) -> None:
        """Runs each buffered call through the machine's (just opened) tunnel, one at a time
        so that order holds, deleting each once the daemon answered. A call answered "not now"
        stops the round (what follows it waits behind it); the round is tried again with
        backoff while this tunnel is open."""
        async with self._delivering.setdefault(machine_id, asyncio.Lock()):
            delay = self.settings.retry_initial_seconds
            try:
                while not await self._deliver_round(machine_id, tunnel):
                    # The backoff, cut short by the tunnel's end: the machine's next tunnel
                    # delivers, and it waits for this one's delivery to let go.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(tunnel.ended.wait(), delay)
                    if tunnel.ended.is_set():
                        return
                    delay = min(delay * 2, self.settings.retry_max_seconds)
            except Exception:  # the tunnel went away: what is left stays buffered
                log.exception("delivery of buffered requests to %s stopped", machine_id)

    async def _deliver_round(self, machine_id: str, tunnel: Any) -> bool:
        """True once nothing is left to deliver; False when a call must be tried again."""
        for message in await self.pending(machine_id):
            outcome = await self._deliver_one(tunnel, message)
            # Named by its place: the receipt its caller got (x-betcode-buffered).
            what = (
                f"buffered {(message.headers or {}).get(METHOD_HEADER)} for {machine_id} "
                f"(place {message.metadata.sequence.stream})"
            )
            if outcome is None or _retryable(outcome):
                why = "no answer" if outcome is None else outcome.error.message
                log.info("%s kept for later: %s", what, why)
                return False
            if outcome.frame_type == frames.ERROR:
                log.warning("%s refused, dropped: %s", what, outcome.error.message)
                await self._keep_refusal(machine_id, message, outcome.error)
            await self._js.delete_msg(message.metadata.stream, message.metadata.sequence.stream)
        return True

    async def _keep_refusal(
        self, machine_id: str, message: Any, error: tunnel_pb2.TunnelError
    ) -> None:
        """For the caller to ask about (MachineService.ListDroppedRequests), as long as the
        buffer would have kept the request."""
        machine = await self._accounts.machine(machine_id)
        if machine is None:
            return
        now = time.time()
        dropped = DroppedRequest(
            at=now,
            owner_id=machine.owner_id,
            machine_id=machine_id,
            place=str(message.metadata.sequence.stream),
            method=(message.headers or {}).get(METHOD_HEADER, ""),
            code=frames.error_status(error).name,
            reason=error.message,
        )
        await self._accounts.record_dropped(dropped, now - self.settings.ttl_seconds)

    async def _deliver_one(self, tunnel: Any, message: Any) -> tunnel_pb2.TunnelFrame | None:
        """The frame that says the daemon took the call (or refused it); None without one in
        time (the daemon is told to cancel it)."""
        headers = message.headers or {}
        request_id = "buffered-" + uuid.uuid4().hex
        metadata = json.loads(headers[METADATA_HEADER])
        # A Converse never ends by itself: its first answer (the message's echo, or an error)
        # says the daemon took the request, unless the caller asked for the end of the call
        # (ACK_RECORDED: the daemon ends it once the message is recorded).
        until_end = metadata.get(frames.ACK_METADATA) == frames.ACK_RECORDED
        done: asyncio.Future[tunnel_pb2.TunnelFrame] = asyncio.get_running_loop().create_future()

        def on_frame(frame: tunnel_pb2.TunnelFrame) -> None:
            ends = frame.frame_type in (frames.STREAM_END, frames.ERROR)
            if not done.done() and (ends or not until_end):
                done.set_result(frame)

        tunnel.local_replies[request_id] = on_frame
        opening = tunnel_pb2.TunnelFrame()
        opening.ParseFromString(
            frames.request_frame(request_id, headers.get(METHOD_HEADER, ""), metadata)
        )
        await tunnel.send(opening)
        for sequence, body in enumerate(unpack(message.data), start=1):
            await tunnel.send(frames.data_frame(request_id, body, sequence))
        await tunnel.send(frames.end_frame(request_id))
        try:
            outcome = await asyncio.wait_for(done, DELIVERY_TIMEOUT_SECONDS)
        except TimeoutError:  # not confirmed: it stays buffered, delivered again later
            await tunnel.send(
                frames.error_frame(request_id, grpc.StatusCode.CANCELLED, "not confirmed")
            )
            return None
        finally:
            tunnel.local_replies.pop(request_id, None)
        if outcome.frame_type not in (frames.STREAM_END, frames.ERROR):
            await tunnel.send(
                frames.error_frame(request_id, grpc.StatusCode.CANCELLED, "delivered")
            )
        return outcome


def _retryable(outcome: tunnel_pb2.TunnelFrame) -> bool:
    """An answer that says "not now". An online end-to-end session the daemon no longer has
    is the exception: its keys are gone, so no later delivery can open the call."""
    return (
        outcome.frame_type == frames.ERROR
        and frames.error_status(outcome.error) in RETRYABLE
        and UNKNOWN_SESSION not in outcome.error.message
    )
