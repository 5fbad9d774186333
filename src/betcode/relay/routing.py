"""Client calls to a machine: any ``/betcode.v1.*`` method the relay does not serve itself is
routed, as opaque bytes, to the relay instance holding the machine's tunnel (TOP-01/02).

The call is authenticated (bearer JWT), authorized (the machine named by ``x-machine-id`` is
the caller's, SEC-04), then opened with a NATS request on the machine's subject (no responder
= the machine is offline) and carried as TunnelFrames both ways. Frames coming back are demuxed
by ``request_id`` into a bounded queue per call; a caller too slow to keep up is failed with
RESOURCE_EXHAUSTED rather than buffered without end."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
import nats.errors
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from betcode.relay import fragments
from betcode.relay.accounts import Accounts
from betcode.relay.auth_service import abort, caller_claims
from betcode.relay.tokens import TokenIssuer
from betcode.remote import frames
from betcode.v1 import tunnel_pb2

if TYPE_CHECKING:
    from betcode.relay.buffer import OfflineBuffer

log = logging.getLogger(__name__)

MACHINE_ID_KEY = "x-machine-id"
RELAY_SERVED = ("betcode.v1.AuthService", "betcode.v1.MachineService", "betcode.v1.TunnelService")
REPLY_TO_HEADER = "reply-to"
OPEN_ACCEPTED = b"ok"
OPEN_REFUSED = b"busy"
OPEN_TIMEOUT_SECONDS = 10.0
# How often an open call asks whether the relay holding the tunnel still carries it: that relay
# may have died (its calls would otherwise wait forever), or the daemon moved to another one.
CHECK_INTERVAL_SECONDS = 2.0
CHECK_PARAM = "check"
CALL_ALIVE = b"alive"
CALL_QUEUE_FRAMES = 1024
# Caller metadata the daemon must not see (routing and credentials) or that gRPC sets itself.
NOT_FORWARDED = {
    "authorization",
    MACHINE_ID_KEY,
    "user-agent",
    "te",
    "content-type",
    frames.RELAY_DEVICE_METADATA,
}
CALLER_USER_KEY = "x-relay-user-id"


def machine_subject(machine_id: str) -> str:
    return f"betcode.machine.{machine_id}"


def inbox_subject(relay_id: str) -> str:
    return f"betcode.relay.{relay_id}.frames"


class MachineBusy(Exception):
    """The tunnel's holder refused a new call (its tunnel queue is full)."""


class _Call:
    def __init__(self) -> None:
        self.frames: asyncio.Queue[tunnel_pb2.TunnelFrame] = asyncio.Queue(CALL_QUEUE_FRAMES)
        self.overflowed = False
        self.sliced = False  # the tunnel's holder joins frames sent in slices (relay/fragments)


class Router(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, nc: Nats, relay_id: str, accounts: Accounts, issuer: TokenIssuer) -> None:
        self._nc = nc
        self._relay_id = relay_id
        self._accounts = accounts
        self._issuer = issuer
        self._calls: dict[str, _Call] = {}
        self._joiner = fragments.Joiner(
            self._calls.__contains__
        )  # the daemon's frames too big for one NATS message
        self._subscription: Any = None
        self._audits: set[asyncio.Task[None]] = set()  # audit records being written
        self.buffer: OfflineBuffer | None = None  # requests for offline machines wait here

    async def start(self) -> None:
        self._subscription = await self._nc.subscribe(
            inbox_subject(self._relay_id), cb=self._on_frame
        )

    async def stop(self) -> None:
        if self._subscription is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._subscription.unsubscribe()
        await asyncio.gather(*self._audits, return_exceptions=True)  # before the database closes

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method: str = details.method
        if not method.startswith("/betcode.v1.") or method[1:].startswith(RELAY_SERVED):
            return None
        # Every shape of call is a stream of messages on the wire; routing does not need to
        # know which one it is (the daemon does).
        return grpc.stream_stream_rpc_method_handler(functools.partial(self._route, method[1:]))

    async def _on_frame(self, msg: Msg) -> None:
        data = self._joiner.take(msg)
        if data is None:
            return
        if isinstance(data, tunnel_pb2.TunnelFrame):  # over the limit: the call ends here
            self._refuse(data)
            return
        frame = tunnel_pb2.TunnelFrame()
        try:
            frame.ParseFromString(data)
        except Exception:
            log.warning("dropped an undecodable frame on %s", msg.subject)
            return
        call = self._calls.get(frame.request_id)
        if call is None or call.overflowed:
            return
        try:
            call.frames.put_nowait(frame)
        except asyncio.QueueFull:
            self._refuse(
                frames.error_frame(
                    frame.request_id,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "the caller reads too slowly; call dropped",
                )
            )

    def _refuse(self, error: tunnel_pb2.TunnelFrame) -> None:
        """Ends a call with `error`, ahead of whatever it still has queued."""
        call = self._calls.get(error.request_id)
        if call is None or call.overflowed:
            return
        call.overflowed = True
        if call.frames.full():
            call.frames.get_nowait()  # room for the marker that ends the call
        call.frames.put_nowait(error)

    async def _route(
        self, method: str, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        claims = await caller_claims(context, self._issuer)
        metadata = tuple(context.invocation_metadata() or ())
        machine_id = next((str(v) for k, v in metadata if k == MACHINE_ID_KEY), "")
        if not machine_id:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"no {MACHINE_ID_KEY} header")
        machine = await self._accounts.machine(machine_id)
        if machine is None or machine.owner_id != claims.user_id:
            await abort(context, grpc.StatusCode.NOT_FOUND, f"no machine {machine_id!r}")
        if claims.machine_ids is not None and machine_id not in claims.machine_ids:
            await abort(
                context, grpc.StatusCode.PERMISSION_DENIED, "the token does not reach this machine"
            )
        device_family = claims.family if claims.machine_ids is not None else None
        context.add_done_callback(
            functools.partial(self._audit, claims.user_id, machine_id, method, device_family)
        )
        forwarded = frames.encode_metadata(
            (k, v) for k, v in metadata if k not in NOT_FORWARDED and not k.startswith("grpc-")
        )
        forwarded[CALLER_USER_KEY] = claims.user_id
        if device_family is not None:
            device = await self._accounts.device_of_family(device_family)
            if device is not None:
                forwarded[frames.RELAY_DEVICE_METADATA] = device.device_id
        forwarded[frames.FLOW_METADATA_KEY] = str(frames.WINDOW)
        request_id = uuid.uuid4().hex
        call = self._calls[request_id] = _Call()
        try:
            async for message in self._carry(
                machine_id, method, request_id, forwarded, call, requests, context
            ):
                yield message
        finally:
            del self._calls[request_id]
            self._joiner.forget(request_id)

    def _audit(
        self,
        user_id: str,
        machine_id: str,
        method: str,
        device_family: str | None,
        context: grpc.aio.ServicerContext,
    ) -> None:
        """Every relayed call, as the relay authenticated it (the token's user, never an id the
        client sent), once it ended: logged, and kept in the accounts database; a paired
        device's call is its last use."""
        code = context.code()
        outcome = code.name if isinstance(code, grpc.StatusCode) else "OK"
        if context.cancelled():
            outcome = "CANCELLED"
        log.info(
            "relayed call user=%s machine=%s method=%s outcome=%s",
            user_id,
            machine_id,
            method,
            outcome,
        )
        now = time.time()
        writes = [self._accounts.record_relayed_call(now, user_id, machine_id, method, outcome)]
        if device_family is not None:
            writes.append(self._accounts.device_used(device_family, now))
        for write in writes:
            task = asyncio.create_task(write)
            self._audits.add(task)
            task.add_done_callback(self._audits.discard)

    async def _open(
        self, machine_id: str, method: str, request_id: str, metadata: dict[str, str], call: _Call
    ) -> bool:
        """Opens the call at the tunnel's holder; False when no relay holds the machine."""
        try:
            answer = await self._nc.request(
                machine_subject(machine_id),
                frames.request_frame(request_id, method, metadata),
                timeout=OPEN_TIMEOUT_SECONDS,
                headers={
                    REPLY_TO_HEADER: inbox_subject(self._relay_id),
                    fragments.CAPABILITY_HEADER: fragments.CAPABILITY,
                },
            )
        except nats.errors.NoRespondersError:
            return False
        if answer.data != OPEN_ACCEPTED:
            raise MachineBusy(machine_id)
        call.sliced = fragments.offered(answer)
        return True

    async def _carry(
        self,
        machine_id: str,
        method: str,
        request_id: str,
        metadata: dict[str, str],
        call: _Call,
        requests: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[bytes]:
        try:
            opened = await self._open(machine_id, method, request_id, metadata, call)
        except (nats.errors.TimeoutError, TimeoutError):
            await abort(context, grpc.StatusCode.UNAVAILABLE, f"machine {machine_id} timed out")
            return
        except MachineBusy:
            await abort(
                context, grpc.StatusCode.RESOURCE_EXHAUSTED, f"machine {machine_id} is busy"
            )
            return
        if not opened:
            await self._offline(machine_id, method, metadata, requests, context)
            return
        await context.send_initial_metadata(())
        subject = machine_subject(machine_id)
        pump = asyncio.create_task(self._pump(subject, request_id, requests, call))
        checker = asyncio.create_task(self._check(subject, request_id, call))
        finished = False
        try:
            read = 0
            while True:
                frame = await call.frames.get()
                if frame.frame_type == frames.STREAM_DATA:
                    yield frame.stream_data.encrypted.ciphertext
                    read += 1
                    if read % frames.CREDIT_BATCH == 0:  # the caller took them: send more
                        credit = frames.credit_frame(request_id, frames.CREDIT_BATCH)
                        await self._nc.publish(subject, credit.SerializeToString())
                elif frame.frame_type == frames.STREAM_END:
                    finished = True
                    context.set_trailing_metadata(
                        frames.decode_metadata(frame.stream_data.metadata)
                    )
                    return
                elif frame.frame_type == frames.ERROR:
                    finished = True
                    context.set_trailing_metadata(frames.error_trailers(frame.error))
                    await abort(context, frames.error_status(frame.error), frame.error.message)
                    return
        finally:
            pump.cancel()
            checker.cancel()
            if not finished:  # the caller went away: the daemon stops its side too
                cancel = frames.error_frame(request_id, grpc.StatusCode.CANCELLED, "caller left")
                with contextlib.suppress(nats.errors.Error):
                    await self._nc.publish(subject, cancel.SerializeToString())

    async def _check(self, subject: str, request_id: str, call: _Call) -> None:
        """Ends the call with UNAVAILABLE once no relay carries it any more; the client then
        reconnects (and resumes from its last sequence) wherever the machine is now."""
        probe = frames.control_frame(
            tunnel_pb2.TUNNEL_CONTROL_TYPE_PING, {CHECK_PARAM: request_id}
        ).SerializeToString()
        while True:
            await asyncio.sleep(CHECK_INTERVAL_SECONDS)
            try:
                answer = await self._nc.request(subject, probe, timeout=CHECK_INTERVAL_SECONDS)
                alive = answer.data == CALL_ALIVE
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError, TimeoutError):
                alive = False
            if not alive:
                lost = frames.error_frame(
                    request_id, grpc.StatusCode.UNAVAILABLE, "the machine's tunnel moved or closed"
                )
                with contextlib.suppress(asyncio.QueueFull):
                    call.frames.put_nowait(lost)
                return

    async def _pump(
        self, subject: str, request_id: str, requests: AsyncIterator[bytes], call: _Call
    ) -> None:
        sequence = 0
        limit = fragments.carried_limit(self._nc, call.sliced)
        with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
            async for message in requests:
                sequence += 1
                data = frames.data_frame(request_id, message, sequence).SerializeToString()
                if len(data) > limit:
                    refused = fragments.too_large(request_id, len(data), limit)
                    await self._nc.publish(subject, refused.SerializeToString())
                    self._refuse(refused)
                    return
                await fragments.publish(self._nc, subject, request_id, data)
            await self._nc.publish(subject, frames.end_frame(request_id).SerializeToString())

    async def _offline(
        self,
        machine_id: str,
        method: str,
        metadata: dict[str, str],
        requests: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext,
    ) -> None:
        if self.buffer is not None and await self.buffer.buffer_call(
            metadata[CALLER_USER_KEY], machine_id, method, metadata, requests, context
        ):
            return  # the buffer answered the caller (kept, or refused as full)
        await abort(context, grpc.StatusCode.UNAVAILABLE, f"machine {machine_id} is offline")
