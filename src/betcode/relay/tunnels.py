"""TunnelService: daemons dial in with their machine certificate and hold one OpenTunnel stream
each. The instance holding a machine's tunnel serves that machine's NATS subject: call frames
from any relay instance go down the tunnel, the daemon's frames go back to the instance that
opened the call (its inbox, named when the call was opened)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import grpc
import nats.errors
from cryptography import x509
from google.protobuf.message import DecodeError
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from betcode.relay import fragments
from betcode.relay.accounts import Accounts, Machine
from betcode.relay.auth_service import abort
from betcode.relay.notifications import Notifications
from betcode.relay.routing import (
    CALL_ALIVE,
    CHECK_PARAM,
    OPEN_ACCEPTED,
    OPEN_REFUSED,
    REPLY_TO_HEADER,
    machine_subject,
)
from betcode.remote import frames
from betcode.remote.machine_proof import ProofRefused, check_issued, proven_certificate
from betcode.remote.notify_params import NOTIFY_PARAM
from betcode.remote.pki import Authority, cert_pem, common_name, serial_hex
from betcode.v1 import tunnel_pb2, tunnel_pb2_grpc

log = logging.getLogger(__name__)

TUNNEL_QUEUE_FRAMES = 1024
HEARTBEAT_INTERVAL_SECONDS = 20  # TOP-04


@dataclass(frozen=True)
class TunnelTiming:
    ping_interval: float = 20.0
    pong_timeout: float = 15.0


class TunnelRefused(Exception):
    pass


def verified_machine_certificate(
    context: grpc.aio.ServicerContext, ca: x509.Certificate
) -> x509.Certificate:
    """The caller's machine certificate: its TLS client certificate (the tunnel port's TLS
    verified it against the CA; checked again here), or on the clients' port, which asks for
    none, the certificate it proved holding the key of in its metadata (remote/machine_proof)."""
    auth = context.auth_context() or {}
    pems = auth.get("x509_pem_cert") or []
    try:
        if not pems:
            metadata = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
            return proven_certificate(metadata, ca)
        cert = x509.load_pem_x509_certificate(pems[0])
        check_issued(cert, ca)
    except ProofRefused as error:
        raise TunnelRefused(str(error)) from None
    return cert


async def proven_machine(
    context: grpc.aio.ServicerContext, ca: x509.Certificate, accounts: Accounts
) -> Machine:
    """The registered machine whose current certificate the caller holds; aborts
    UNAUTHENTICATED otherwise."""
    try:
        cert = verified_machine_certificate(context, ca)
    except TunnelRefused as error:
        await abort(context, grpc.StatusCode.UNAUTHENTICATED, str(error))
        raise AssertionError from None
    machine = await accounts.machine(common_name(cert))
    if machine is None or machine.cert_serial != serial_hex(cert):
        await abort(
            context,
            grpc.StatusCode.UNAUTHENTICATED,
            "the machine certificate was revoked or replaced; register the machine again",
        )
        raise AssertionError
    return machine


class _Tunnel:
    def __init__(self, nc: Nats, machine_id: str) -> None:
        self.nc = nc
        self.machine_id = machine_id
        self.outgoing: asyncio.Queue[tunnel_pb2.TunnelFrame | None] = asyncio.Queue(
            TUNNEL_QUEUE_FRAMES
        )
        self.reply_to: dict[str, str] = {}
        self.sliced: set[str] = set()  # calls whose router joins frames sent in slices
        self.joiner = fragments.Joiner(
            self.reply_to.__contains__
        )  # the routers' frames too big for one NATS message
        self.last_pong = time.monotonic()
        self.failure: str | None = None  # why the relay ended the tunnel, for the daemon
        self.on_notify: Callable[[dict[str, str]], Coroutine[Any, Any, object]] | None = None
        self.on_renew: Callable[[str], Coroutine[Any, Any, None]] | None = None
        self.local_replies: dict[str, Callable[[tunnel_pb2.TunnelFrame], None]] = {}
        self.ended = asyncio.Event()  # its stream ended: nothing sent on it reaches the daemon

    def close(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.outgoing.put_nowait(None)

    async def on_nats(self, msg: Msg) -> None:
        data = self.joiner.take(msg)
        if data is None:
            return
        if isinstance(data, tunnel_pb2.TunnelFrame):  # over the limit: the call ends, both ends
            await self._end_refused(data)
            return
        frame = tunnel_pb2.TunnelFrame()
        try:
            frame.ParseFromString(data)
        except Exception:
            log.warning("dropped an undecodable frame for %s", self.machine_id)
            return
        if frame.frame_type == frames.CONTROL and CHECK_PARAM in frame.control.params:
            carried = frame.control.params[CHECK_PARAM] in self.reply_to
            await msg.respond(CALL_ALIVE if carried else b"gone")
            return
        if (
            frame.frame_type == frames.CONTROL
            and frames.REVOKED_DEVICE_PARAM in frame.control.params
        ):
            with contextlib.suppress(asyncio.QueueFull):  # a full tunnel: the binding holds
                self.outgoing.put_nowait(frame)
            return
        if frame.frame_type == frames.REQUEST:
            reply_to = (msg.headers or {}).get(REPLY_TO_HEADER, "")
            if not reply_to or self.outgoing.full():
                await msg.respond(OPEN_REFUSED)
                return
            self.reply_to[frame.request_id] = reply_to
            self.outgoing.put_nowait(frame)
            if fragments.offered(msg):
                self.sliced.add(frame.request_id)
                capable = {fragments.CAPABILITY_HEADER: fragments.CAPABILITY}
                await self.nc.publish(msg.reply, OPEN_ACCEPTED, headers=capable)
            else:
                await msg.respond(OPEN_ACCEPTED)
            return
        known = self.reply_to.get(frame.request_id)
        if known is None:
            return  # a call that already ended
        if frame.frame_type == frames.ERROR:
            self._forget(frame.request_id)
        try:
            self.outgoing.put_nowait(frame)
        except asyncio.QueueFull:
            self._forget(frame.request_id)
            full = frames.error_frame(
                frame.request_id, grpc.StatusCode.RESOURCE_EXHAUSTED, "the tunnel is full"
            )
            await self.nc.publish(known, full.SerializeToString())

    def _forget(self, request_id: str) -> str | None:
        """A call that ended here: where its answers went, if it was still open."""
        self.sliced.discard(request_id)
        self.joiner.forget(request_id)
        return self.reply_to.pop(request_id, None)

    async def _end_refused(self, refused: tunnel_pb2.TunnelFrame) -> None:
        """Ends a call whose frame the relay does not carry, at the daemon and at its caller;
        the tunnel and its other calls go on."""
        log.warning("machine %s: %s", self.machine_id, refused.error.message)
        reply_to = self._forget(refused.request_id)
        if reply_to is None:
            return
        with contextlib.suppress(asyncio.QueueFull):
            self.outgoing.put_nowait(refused)
        await self.nc.publish(reply_to, refused.SerializeToString())

    async def from_daemon(self, frame: tunnel_pb2.TunnelFrame) -> None:
        if frame.frame_type == frames.CONTROL and frames.RENEW_CSR_PARAM in frame.control.params:
            if self.on_renew is not None:
                await self.on_renew(frame.control.params[frames.RENEW_CSR_PARAM])
            return
        if frame.frame_type == frames.CONTROL and NOTIFY_PARAM in frame.control.params:
            if self.on_notify is not None:
                await self.on_notify(dict(frame.control.params))
            return
        if frame.frame_type == frames.CONTROL:
            if frame.control.control_type == tunnel_pb2.TUNNEL_CONTROL_TYPE_PONG:
                self.last_pong = time.monotonic()
            elif frame.control.control_type == tunnel_pb2.TUNNEL_CONTROL_TYPE_PING:
                await self.send(frames.control_frame(tunnel_pb2.TUNNEL_CONTROL_TYPE_PONG))
            return
        ends = frame.frame_type in (frames.STREAM_END, frames.ERROR)
        local = self.local_replies.get(frame.request_id)
        if local is not None:  # a call the relay itself made (buffered delivery)
            local(frame)
            return
        reply_to = self.reply_to.get(frame.request_id)
        if reply_to is None:
            log.warning(
                "frame for unknown call %r from %s dropped", frame.request_id, self.machine_id
            )
            return
        data = frame.SerializeToString()
        limit = fragments.carried_limit(self.nc, frame.request_id in self.sliced)
        if len(data) > limit:
            # Not carried: the call ends at both ends; the tunnel and its other calls go on.
            await self._end_refused(fragments.too_large(frame.request_id, len(data), limit))
            return
        if ends:
            self._forget(frame.request_id)
        await fragments.publish(self.nc, reply_to, frame.request_id, data)

    async def send(self, frame: tunnel_pb2.TunnelFrame) -> None:
        await self.outgoing.put(frame)

    async def fail_open_calls(self) -> None:
        """The tunnel's stream ended: every call still open on it, the relay's own too (a
        buffered delivery, kept for the next tunnel), is told the machine is gone."""
        self.ended.set()
        for request_id, local in list(self.local_replies.items()):
            local(self._gone(request_id))
        for request_id, reply_to in list(self.reply_to.items()):
            with contextlib.suppress(nats.errors.Error):
                await self.nc.publish(reply_to, self._gone(request_id).SerializeToString())
        self.reply_to.clear()
        self.sliced.clear()

    def _gone(self, request_id: str) -> tunnel_pb2.TunnelFrame:
        return frames.error_frame(
            request_id, grpc.StatusCode.UNAVAILABLE, f"machine {self.machine_id} disconnected"
        )


OnOnline = Callable[[str, "_Tunnel"], Coroutine[Any, Any, None]]


class TunnelService(tunnel_pb2_grpc.TunnelServiceServicer):
    def __init__(
        self,
        nc: Nats,
        relay_id: str,
        accounts: Accounts,
        ca: x509.Certificate,
        timing: TunnelTiming | None = None,
    ) -> None:
        self._nc = nc
        self._relay_id = relay_id
        self._accounts = accounts
        self._ca = ca
        self._timing = timing or TunnelTiming()
        self._tunnels: dict[str, _Tunnel] = {}
        self.on_online: OnOnline | None = None  # the offline buffer delivers through this
        self.notifications: Notifications | None = None
        self.authority: Authority | None = None  # signs renewed machine certificates

    async def _machine(self, context: grpc.aio.ServicerContext) -> Machine:
        return await proven_machine(context, self._ca, self._accounts)

    async def device_revoked(self, machine_id: str, device_id: str) -> None:
        """Tells the machine, over whichever relay instance holds its tunnel, that a device
        login paired with it was revoked here: its daemon signs that phone out at once (open
        streams closed). A machine away misses it, and needs not: its daemon takes that phone's
        credential only with the login, which is refused from now on."""
        revoked = frames.control_frame(
            tunnel_pb2.TUNNEL_CONTROL_TYPE_UNSPECIFIED, {frames.REVOKED_DEVICE_PARAM: device_id}
        )
        await self._nc.publish(machine_subject(machine_id), revoked.SerializeToString())

    async def Register(
        self, request: tunnel_pb2.TunnelRegisterRequest, context: grpc.aio.ServicerContext
    ) -> tunnel_pb2.TunnelRegisterResponse:
        machine = await self._machine(context)
        if request.machine_id and request.machine_id != machine.machine_id:
            await abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the certificate is for {machine.machine_id}, not {request.machine_id}",
            )
        return tunnel_pb2.TunnelRegisterResponse(
            accepted=True,
            relay_id=self._relay_id,
            heartbeat_interval_secs=HEARTBEAT_INTERVAL_SECONDS,
        )

    async def Heartbeat(
        self, request: tunnel_pb2.TunnelHeartbeat, context: grpc.aio.ServicerContext
    ) -> tunnel_pb2.TunnelHeartbeat:
        machine = await self._machine(context)
        if machine.machine_id in self._tunnels:
            await self._accounts.set_online(machine.machine_id, self._relay_id, time.time())
        reply = tunnel_pb2.TunnelHeartbeat(machine_id=machine.machine_id)
        reply.timestamp.GetCurrentTime()
        return reply

    async def OpenTunnel(
        self, requests: AsyncIterator[tunnel_pb2.TunnelFrame], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[tunnel_pb2.TunnelFrame]:
        machine = await self._machine(context)
        machine_id = machine.machine_id
        tunnel = _Tunnel(self._nc, machine_id)
        tunnel.on_renew = functools.partial(self._renew, tunnel)
        notifications = self.notifications
        if notifications is not None:

            async def notify(params: dict[str, str]) -> object:
                return await notifications.notify(
                    machine_id, machine.name, machine.owner_id, params
                )

            tunnel.on_notify = notify
        previous = self._tunnels.pop(machine_id, None)
        if previous is not None:
            previous.close()  # the daemon reconnected; its old tunnel is dead or dying
        self._tunnels[machine_id] = tunnel
        subscription = await self._nc.subscribe(machine_subject(machine_id), cb=tunnel.on_nats)
        await self._accounts.set_online(machine_id, self._relay_id, time.time())
        log.info("machine %s tunnel open on relay %s", machine_id, self._relay_id)
        reader = asyncio.create_task(self._read(requests, tunnel))
        pinger = asyncio.create_task(self._ping(tunnel))
        if self.on_online is not None:
            asyncio.create_task(self.on_online(machine_id, tunnel))  # noqa: RUF006
        try:
            while True:
                frame = await tunnel.outgoing.get()
                if frame is None:
                    break
                yield frame
            if tunnel.failure is not None:
                await abort(context, grpc.StatusCode.INVALID_ARGUMENT, tunnel.failure)
        finally:
            reader.cancel()
            pinger.cancel()
            with contextlib.suppress(nats.errors.Error):
                await subscription.unsubscribe()
            await tunnel.fail_open_calls()
            if self._tunnels.get(machine_id) is tunnel:
                del self._tunnels[machine_id]
                await self._accounts.set_offline_if_held_by(machine_id, self._relay_id, time.time())
            log.info("machine %s tunnel closed on relay %s", machine_id, self._relay_id)

    async def _renew(self, tunnel: _Tunnel, csr_pem: str) -> None:
        """SEC-03: a new certificate for the machine's new key, asked over its own tunnel
        (so by the holder of the current certificate)."""
        if self.authority is None:
            return
        try:
            cert = self.authority.machine_certificate(csr_pem.encode(), tunnel.machine_id)
        except ValueError as error:
            log.warning("renewal CSR of %s refused: %s", tunnel.machine_id, error)
            return
        await self._accounts.set_cert_serial(tunnel.machine_id, serial_hex(cert))
        log.info("machine %s certificate renewed", tunnel.machine_id)
        await tunnel.send(
            frames.control_frame(
                tunnel_pb2.TUNNEL_CONTROL_TYPE_UNSPECIFIED,
                {frames.CERTIFICATE_PARAM: cert_pem(cert).decode()},
            )
        )

    async def _read(self, requests: AsyncIterator[tunnel_pb2.TunnelFrame], tunnel: _Tunnel) -> None:
        try:
            async for frame in requests:
                await tunnel.from_daemon(frame)
        except (grpc.RpcError, asyncio.CancelledError):
            pass
        except DecodeError as error:
            tunnel.failure = f"undecodable frame from the daemon: {error}"
            log.warning("machine %s: %s; tunnel closed", tunnel.machine_id, tunnel.failure)
        except Exception:  # a frame that cannot be handled ends this tunnel, loudly
            tunnel.failure = "the relay could not handle a frame"
            log.exception("tunnel of %s failed", tunnel.machine_id)
        tunnel.close()

    async def _ping(self, tunnel: _Tunnel) -> None:
        while True:
            await asyncio.sleep(self._timing.ping_interval)
            sent = time.monotonic()
            await tunnel.send(frames.control_frame(tunnel_pb2.TUNNEL_CONTROL_TYPE_PING))
            await asyncio.sleep(self._timing.pong_timeout)
            if tunnel.last_pong < sent:
                log.warning("machine %s missed its PONG; closing its tunnel", tunnel.machine_id)
                tunnel.close()
                return

    async def drain(self) -> None:
        """Asks every daemon to move to another relay (DRAIN; they answer DRAIN_ACK)."""
        for tunnel in list(self._tunnels.values()):
            await tunnel.send(frames.control_frame(tunnel_pb2.TUNNEL_CONTROL_TYPE_DRAIN))
