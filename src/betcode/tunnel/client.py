"""The daemon's side of the tunnel: dial the relay with the machine certificate, register,
heartbeat, answer PING/DRAIN, and serve each relayed call by making it, as a real gRPC call, on
the daemon's own local socket. Relayed clients therefore go through exactly the code paths of
local ones (sessions, replay, permissions, config). Reconnects with exponential backoff and
jitter over the relay URLs it was given (TOP-03/04)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from cryptography.hazmat.primitives.asymmetric import ec

from betcode.remote import frames
from betcode.remote.e2e import (
    E2E_METADATA_KEY,
    CallCipher,
    DaemonIdentity,
    E2EError,
    UnknownSession,
)
from betcode.remote.frames import relay_target
from betcode.remote.machine_proof import proof_metadata
from betcode.remote.web_push import PushNotPosted, RelayUnreachable
from betcode.sessions.attention import AttentionLog
from betcode.tunnel.attention import Announcer
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import (
    agent_pb2_grpc,
    machine_pb2,
    machine_pb2_grpc,
    push_relay_pb2,
    push_relay_pb2_grpc,
    tunnel_pb2,
    tunnel_pb2_grpc,
)

log = logging.getLogger(__name__)

CALL_QUEUE_MESSAGES = 256
EXCHANGE_KEYS = "betcode.v1.AgentService/ExchangeKeys"
OUTGOING_FRAMES = 1024
PUSH_TIMEOUT_SECONDS = 20.0  # the relay's POST to the push service takes up to 10 s
RELAY_ASK_SECONDS = 10.0
SIGNED_OUT_HERE = "this phone was signed out on the machine: pair it again (`betcode web pair`)"
# A daemon's answers that say it did not take the call (stopping, or the call cancelled here):
# a sealed call answered so may be delivered again from the relay's buffer.
NOT_TAKEN = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


async def _nothing(relay_login: str) -> None:
    """No web client to tell of a revoked relay device login."""


@dataclass(frozen=True)
class Backoff:
    """1 s doubling to 60 s, ±20 % jitter (TOP-04)."""

    initial: float = 1.0
    maximum: float = 60.0
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * 2.0 ** min(attempt, 32))
        return float(base * (1 + random.uniform(-self.jitter, self.jitter)))


@dataclass(frozen=True)
class TunnelSettings:
    relay_urls: Sequence[str]
    identity: MachineIdentity
    local_target: str  # the daemon's own socket, "unix:/path"
    ca_file: Path | None = None  # else the CA stored at `machine register`
    heartbeat_interval: float = 20.0
    heartbeat_timeout: float = 15.0
    backoff: Backoff = field(default_factory=Backoff)
    e2e: DaemonIdentity | None = None  # answers ExchangeKeys, opens encrypted calls
    # Relayed calls without end-to-end encryption are refused unless this is set (the relay
    # itself could then read and make them); each one allowed is logged as a warning.
    allow_unencrypted: bool = False
    attention_poll: float = 5.0  # how often what needs a human is looked for (TOP-06)
    attention: AttentionLog | None = None  # turn ends and input locks of the daemon's sessions
    renew_before: datetime.timedelta = datetime.timedelta(days=30)  # SEC-03


class _Drained(Exception):
    pass


class TunnelClient:
    def __init__(self, settings: TunnelSettings) -> None:
        self.settings = settings
        self.connected = asyncio.Event()
        # Whether a relay device login belongs to a phone signed out on this daemon (the web
        # client's device store sets it when it starts).
        self.relay_login_signed_out: Callable[[str], bool] = lambda relay_login: False
        self.relay_login_revoked: Callable[[str], Awaitable[None]] = _nothing
        self.relay_id = ""
        self.relay_url = ""  # the relay of the open tunnel
        self.connected_since: float | None = None  # wall clock, while a tunnel is open
        self.last_error = ""  # why the last tunnel failed (or could not open)
        self._local: grpc.aio.Channel | None = None
        self._outgoing: asyncio.Queue[tunnel_pb2.TunnelFrame] = asyncio.Queue(OUTGOING_FRAMES)
        self._calls: dict[str, asyncio.Queue[bytes | None]] = {}
        self._call_tasks: dict[str, asyncio.Task[None]] = {}
        self._windows: dict[str, asyncio.Semaphore] = {}  # calls whose relay grants credit
        self._announcer = Announcer(settings.attention)
        self._renewing: ec.EllipticCurvePrivateKey | None = None  # key awaiting its cert
        self._channel: grpc.aio.Channel | None = None  # to the relay, while the tunnel is open

    async def run(self) -> None:
        """Runs until cancelled; never raises for a relay that is down."""
        self.settings.identity.require()
        self._local = grpc.aio.insecure_channel(
            self.settings.local_target,
            options=[
                ("grpc.max_send_message_length", frames.MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", frames.MAX_MESSAGE_BYTES),
            ],
        )
        attempt = 0
        index = 0
        try:
            while True:
                url = self.settings.relay_urls[index % len(self.settings.relay_urls)]
                try:
                    await self._session(url)
                    attempt = 0  # a tunnel that was up: try again at once
                except _Drained:
                    log.info("relay %s drained this tunnel; moving on", url)
                    index += 1
                    continue
                except (grpc.RpcError, OSError, TimeoutError) as error:
                    self.last_error = f"{url}: {_describe(error)}"
                    log.warning("relay tunnel to %s failed: %s", url, _describe(error))
                finally:
                    self.connected.clear()
                    self.connected_since = None
                    self._end_calls()
                index += 1
                delay = self.settings.backoff.delay(attempt)
                attempt += 1
                await asyncio.sleep(delay)
        finally:
            await self._local.close()

    def _credentials(self) -> grpc.ChannelCredentials:
        identity = self.settings.identity
        ca = self.settings.ca_file or identity.ca_file
        return grpc.ssl_channel_credentials(
            root_certificates=ca.read_bytes(),
            private_key=identity.key_file.read_bytes(),
            certificate_chain=identity.cert_file.read_bytes(),
        )

    def _proof(self) -> tuple[tuple[str, str], ...]:
        """The machine's certificate and a fresh signature: what the relay checks when the
        daemon dials the clients' port (one address), where TLS asks for no certificate."""
        identity = self.settings.identity
        return proof_metadata(identity.private_key(), identity.certificate())

    async def _session(self, url: str) -> None:
        identity = self.settings.identity
        channel = grpc.aio.secure_channel(
            relay_target(url),
            self._credentials(),
            options=[
                ("grpc.max_send_message_length", frames.MAX_FRAME_BYTES),
                ("grpc.max_receive_message_length", frames.MAX_FRAME_BYTES),
            ],
        )
        try:
            stub = tunnel_pb2_grpc.TunnelServiceStub(channel)
            machine_id = identity.machine_id()
            call = stub.OpenTunnel(metadata=self._proof())
            registered = await stub.Register(
                tunnel_pb2.TunnelRegisterRequest(
                    machine_id=machine_id,
                    machine_name=identity.machine_name(),
                    identity_pubkey=self.settings.e2e.public if self.settings.e2e else b"",
                ),
                timeout=self.settings.heartbeat_timeout,
                metadata=self._proof(),
            )
            if not registered.accepted:
                raise OSError(f"relay {url} did not accept machine {machine_id}")
            self.relay_id = registered.relay_id
            self.relay_url = url
            self._channel = channel
            self.connected_since = time.time()
            self.connected.set()
            log.info("tunnel to relay %s (%s) open", url, registered.relay_id)
            if identity.expires_within(self.settings.renew_before):
                self._renewing, csr = identity.renewal_request()
                await self._outgoing.put(
                    frames.control_frame(
                        tunnel_pb2.TUNNEL_CONTROL_TYPE_UNSPECIFIED,
                        {frames.RENEW_CSR_PARAM: csr.decode()},
                    )
                )
            tasks = [
                asyncio.create_task(self._write(call)),
                asyncio.create_task(self._heartbeat(stub, machine_id)),
                asyncio.create_task(self._read(call)),
                asyncio.create_task(self._watch_attention()),
            ]
            try:
                done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                call.cancel()
            for task in done:
                task.result()  # raises what ended the session
        finally:
            self._channel = None
            await channel.close()

    async def deliver_push(self, endpoint: str, body: bytes, headers: Mapping[str, str]) -> int:
        """One Web Push message, encrypted and signed by the daemon, POSTed by the relay
        (PushRelayService, on the tunnel's connection): the push service's status. Raises
        RelayUnreachable when the relay is not connected or did not answer, PushNotPosted
        when it refused to POST it."""
        channel = self._channel
        if channel is None:
            raise RelayUnreachable("the relay is not connected")
        try:
            result = await push_relay_pb2_grpc.PushRelayServiceStub(channel).Deliver(
                push_relay_pb2.PushDelivery(endpoint=endpoint, body=body, headers=headers),
                timeout=PUSH_TIMEOUT_SECONDS,
                metadata=self._proof(),
            )
        except grpc.aio.AioRpcError as error:
            raise RelayUnreachable(f"the relay: {_describe(error)}") from None
        if result.refused:
            raise PushNotPosted(f"the relay did not POST it: {result.refused}")
        return int(result.status)

    async def revoke_paired_device(self, device_id: str) -> bool:
        """Asks the relay, as this machine (MachineService.RevokePairedDevice, on the tunnel's
        connection), to revoke its device login `device_id` (a phone paired through it whose
        device credential this daemon revoked): True when it did, False when it was revoked
        already or is not this machine's. RelayUnreachable when the relay is not connected
        or did not answer."""
        channel = self._channel
        if channel is None:
            raise RelayUnreachable("the relay is not connected")
        try:
            reply = await machine_pb2_grpc.MachineServiceStub(channel).RevokePairedDevice(
                machine_pb2.RevokePairedDeviceRequest(device_id=device_id),
                timeout=RELAY_ASK_SECONDS,
                metadata=self._proof(),
            )
        except grpc.aio.AioRpcError as error:
            raise RelayUnreachable(f"the relay: {_describe(error)}") from None
        return bool(reply.revoked)

    async def _write(self, call: Any) -> None:
        while True:
            await call.write(await self._outgoing.get())

    async def _heartbeat(self, stub: tunnel_pb2_grpc.TunnelServiceStub, machine_id: str) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            beat = tunnel_pb2.TunnelHeartbeat(
                machine_id=machine_id, active_sessions=len(self._calls)
            )
            beat.timestamp.GetCurrentTime()
            await stub.Heartbeat(
                beat, timeout=self.settings.heartbeat_timeout, metadata=self._proof()
            )

    async def _watch_attention(self) -> None:
        """What needs a human goes to the relay as control frames (tunnel/attention.py)."""
        assert self._local is not None
        stub = agent_pb2_grpc.AgentServiceStub(self._local)

        async def announce(params: dict[str, str]) -> None:
            await self._outgoing.put(
                frames.control_frame(tunnel_pb2.TUNNEL_CONTROL_TYPE_UNSPECIFIED, params)
            )

        while True:
            await self._announcer.round(stub, announce)
            await asyncio.sleep(self.settings.attention_poll)

    async def _read(self, call: Any) -> None:
        while True:
            frame = await call.read()
            if frame is grpc.aio.EOF:
                raise OSError("the relay closed the tunnel")
            await self._on_frame(frame)

    async def _on_frame(self, frame: tunnel_pb2.TunnelFrame) -> None:
        if frame.frame_type == frames.CONTROL and frames.CERTIFICATE_PARAM in frame.control.params:
            if self._renewing is not None:
                # Used from the next connection on; the open tunnel goes on as it is.
                self.settings.identity.store_renewed(
                    self._renewing, frame.control.params[frames.CERTIFICATE_PARAM]
                )
                self._renewing = None
                log.info("machine certificate renewed")
            return
        if (
            frame.frame_type == frames.CONTROL
            and frames.REVOKED_DEVICE_PARAM in frame.control.params
        ):
            await self.relay_login_revoked(frame.control.params[frames.REVOKED_DEVICE_PARAM])
            return
        if frame.frame_type == frames.CONTROL and frames.CREDIT_PARAM in frame.control.params:
            window = self._windows.get(frame.request_id)
            if window is not None:
                for _ in range(int(frame.control.params[frames.CREDIT_PARAM])):
                    window.release()
            return
        if frame.frame_type == frames.CONTROL:
            kind = frame.control.control_type
            if kind == tunnel_pb2.TUNNEL_CONTROL_TYPE_PING:
                await self._outgoing.put(frames.control_frame(tunnel_pb2.TUNNEL_CONTROL_TYPE_PONG))
            elif kind == tunnel_pb2.TUNNEL_CONTROL_TYPE_DRAIN:
                await self._outgoing.put(
                    frames.control_frame(tunnel_pb2.TUNNEL_CONTROL_TYPE_DRAIN_ACK)
                )
                await asyncio.sleep(0.1)  # let the ACK leave before the stream ends
                raise _Drained
            return
        request_id = frame.request_id
        if frame.frame_type == frames.REQUEST:
            await self._open_call(request_id, frame.stream_data)
            return
        queue_of_call = self._calls.get(request_id)
        if queue_of_call is None:
            return
        if frame.frame_type == frames.STREAM_DATA:
            try:
                queue_of_call.put_nowait(frame.stream_data.encrypted.ciphertext)
            except asyncio.QueueFull:
                self._cancel(request_id)
                await self._outgoing.put(
                    frames.error_frame(
                        request_id, grpc.StatusCode.RESOURCE_EXHAUSTED, "too many queued requests"
                    )
                )
        elif frame.frame_type == frames.STREAM_END:
            with contextlib.suppress(asyncio.QueueFull):
                queue_of_call.put_nowait(None)
        elif frame.frame_type == frames.ERROR:
            self._cancel(request_id)

    async def _open_call(self, request_id: str, opening: tunnel_pb2.StreamPayload) -> None:
        method = frames.full_method(opening.method)
        relay_login = opening.metadata.get(frames.RELAY_DEVICE_METADATA, "")
        if relay_login and self.relay_login_signed_out(relay_login):
            # A phone signed out here whose relay login the relay was not told to revoke
            # (away at the time): it reaches this machine no more all the same.
            log.warning("relayed %s refused: relay device login %s signed out", method, relay_login)
            await self._outgoing.put(
                frames.error_frame(request_id, grpc.StatusCode.UNAUTHENTICATED, SIGNED_OUT_HERE)
            )
            return
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(CALL_QUEUE_MESSAGES)
        if method == EXCHANGE_KEYS and self.settings.e2e is not None:
            # Answered here, public keys only: the client checks the identity it pinned.
            self._calls[request_id] = queue
            self._call_tasks[request_id] = asyncio.create_task(
                self._exchange_keys(request_id, self.settings.e2e, queue)
            )
            return
        try:
            cipher = await self._call_cipher(method, opening)
        except E2EError as error:
            log.warning("relayed %s refused: %s", method, error)
            # UNAVAILABLE for a session the daemon forgot: the client makes a new one, retries.
            code = (
                grpc.StatusCode.UNAVAILABLE
                if isinstance(error, UnknownSession)
                else grpc.StatusCode.UNAUTHENTICATED
            )
            await self._outgoing.put(frames.error_frame(request_id, code, str(error)))
            return
        self._calls[request_id] = queue
        window = opening.metadata.get(frames.FLOW_METADATA_KEY, "")
        if window.isdigit():
            self._windows[request_id] = asyncio.Semaphore(int(window))
        self._call_tasks[request_id] = asyncio.create_task(
            self._serve(request_id, method, opening, queue, cipher)
        )

    async def _call_cipher(
        self, method: str, opening: tunnel_pb2.StreamPayload
    ) -> CallCipher | None:
        """The call's cipher; None for a call without end-to-end encryption that the settings
        allow. Raises E2EError for one refused, before anything of it reaches the daemon."""
        header = opening.metadata.get(E2E_METADATA_KEY)
        e2e = self.settings.e2e
        if header and e2e is not None:
            # In a thread: a sealed call's replay record is written to disk first.
            return await asyncio.to_thread(e2e.open_call, header, method)
        if header:
            raise E2EError("this daemon has no end-to-end identity")
        if not self.settings.allow_unencrypted:
            raise E2EError(
                "this daemon takes relayed calls only end-to-end encrypted "
                "(daemon.relay.allow_unencrypted is off)"
            )
        log.warning(
            "relayed %s WITHOUT end-to-end encryption: the relay can read and forge it "
            "(daemon.relay.allow_unencrypted is on)",
            method,
        )
        return None

    async def _exchange_keys(
        self, request_id: str, e2e: DaemonIdentity, requests: asyncio.Queue[bytes | None]
    ) -> None:
        try:
            request = await requests.get()
            answer = e2e.exchange(request or b"")
        except E2EError as error:
            await self._outgoing.put(
                frames.error_frame(request_id, grpc.StatusCode.INVALID_ARGUMENT, str(error))
            )
        else:
            await self._outgoing.put(frames.data_frame(request_id, answer, 1))
            await self._outgoing.put(frames.end_frame(request_id))
        finally:
            self._calls.pop(request_id, None)
            self._call_tasks.pop(request_id, None)

    def _cancel(self, request_id: str) -> None:
        self._calls.pop(request_id, None)
        self._windows.pop(request_id, None)
        task = self._call_tasks.pop(request_id, None)
        if task is not None:
            task.cancel()

    def _end_calls(self) -> None:
        for request_id in list(self._call_tasks):
            self._cancel(request_id)

    async def _serve(
        self,
        request_id: str,
        method: str,
        opening: tunnel_pb2.StreamPayload,
        requests: asyncio.Queue[bytes | None],
        cipher: CallCipher | None,
    ) -> None:
        assert self._local is not None
        call = self._local.stream_stream("/" + method)(
            metadata=frames.relayed_metadata(opening.metadata)
        )
        feeder = asyncio.create_task(self._feed(request_id, method, call, requests, cipher))
        window = self._windows.get(request_id)
        # When the daemon has taken the call, as the relay's buffer judges it: at its end when
        # the caller asked for that (the message recorded), else at its first answer.
        taken_at_end = opening.metadata.get(frames.ACK_METADATA) == frames.ACK_RECORDED
        sequence = 0
        try:
            while True:
                message = await call.read()
                if message is grpc.aio.EOF:
                    break
                if sequence == 0 and not taken_at_end:
                    await self._taken(cipher)
                if window is not None:
                    await window.acquire()  # the caller has not read enough yet: wait
                sequence += 1
                if cipher is not None:
                    message = cipher.seal(message)
                await self._outgoing.put(frames.data_frame(request_id, message, sequence))
            trailers = await call.trailing_metadata()
            await self._taken(cipher)
            await self._outgoing.put(frames.end_frame(request_id, tuple(trailers or ())))
        except grpc.aio.AioRpcError as error:
            if error.code() not in NOT_TAKEN:
                await self._taken(cipher)
            await self._outgoing.put(
                frames.error_frame(
                    request_id,
                    error.code(),
                    error.details() or "",
                    tuple(error.trailing_metadata() or ()),
                )
            )
        finally:
            feeder.cancel()
            call.cancel()
            if cipher is not None and self.settings.e2e is not None:
                self.settings.e2e.ended(cipher)
            self._calls.pop(request_id, None)
            self._call_tasks.pop(request_id, None)
            self._windows.pop(request_id, None)

    async def _taken(self, cipher: CallCipher | None) -> None:
        """The daemon took the call: a sealed one is recorded as run before the answer
        leaves, so the relay's buffer, deleting it on that answer, never makes it run again."""
        if cipher is not None and cipher.sealed and self.settings.e2e is not None:
            await asyncio.to_thread(self.settings.e2e.taken, cipher)

    async def _feed(
        self,
        request_id: str,
        method: str,
        call: Any,
        requests: asyncio.Queue[bytes | None],
        cipher: CallCipher | None,
    ) -> None:
        with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
            while True:
                message = await requests.get()
                if message is None:
                    await call.done_writing()
                    return
                if cipher is not None:
                    try:
                        message = cipher.open(message)
                    except E2EError as error:
                        log.warning("relayed %s refused: %s", method, error)
                        self._cancel(request_id)
                        await self._outgoing.put(
                            frames.error_frame(
                                request_id, grpc.StatusCode.UNAUTHENTICATED, str(error)
                            )
                        )
                        return
                    if self.settings.e2e is not None:
                        self.settings.e2e.reached(cipher)
                await call.write(message)


def _describe(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error) or type(error).__name__
