"""End to end against the relay itself: everything a daemon gets from the relay comes through
its tunnel as frames, so here the test is the relay. It feeds the real tunnel client frames —
made by a real client's ciphers, captured, replayed, moved — and a stand-in daemon on a real
Unix socket records every call and message that reached it. A call without end-to-end
encryption, a call replayed (also after delivery and a daemon restart), a message repeated,
reordered, or moved to another call or method: each is refused and reaches nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from betcode.remote import frames
from betcode.remote.e2e import (
    E2E_METADATA_KEY,
    UNKNOWN_SESSION,
    CallCipher,
    ClientHandshake,
    ClientSession,
    DaemonIdentity,
)
from betcode.tunnel.client import EXCHANGE_KEYS, TunnelClient, TunnelSettings
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import tunnel_pb2

RENAME = "betcode.v1.AgentService/RenameSession"
DELETE = "betcode.v1.AgentService/DeleteSession"
CONVERSE = "betcode.v1.AgentService/Converse"


def _raw(data: bytes) -> bytes:
    return data


@dataclass
class StandIn:
    """A daemon that records what reaches it: (method, message) for every request message."""

    reached: list[tuple[str, bytes]] = field(default_factory=list)

    def unary(self, method: str) -> Any:
        async def handle(request: bytes, _context: Any) -> bytes:
            self.reached.append((method, request))
            return b"done:" + request

        return grpc.unary_unary_rpc_method_handler(handle, _raw, _raw)

    def echo(self, method: str) -> Any:
        async def handle(requests: Any, _context: Any) -> AsyncIterator[bytes]:
            async for request in requests:
                self.reached.append((method, request))
                yield b"echo:" + request

        return grpc.stream_stream_rpc_method_handler(handle, _raw, _raw)


class RelaySide:
    """The relay's end of one daemon's tunnel: frames in, the daemon's frames out."""

    def __init__(self, tunnel: TunnelClient) -> None:
        self.tunnel = tunnel
        self._numbers = iter(range(1, 1_000_000))

    def new_id(self) -> str:
        return f"call-{next(self._numbers)}"

    async def open(
        self, request_id: str, method: str, header: str | None, *, until_recorded: bool = False
    ) -> None:
        metadata = {E2E_METADATA_KEY: header} if header else {}
        if until_recorded:  # answered by its end, as a buffered `run --session` asks
            metadata[frames.ACK_METADATA] = frames.ACK_RECORDED
        frame = tunnel_pb2.TunnelFrame()
        frame.ParseFromString(frames.request_frame(request_id, method, metadata))
        await self.tunnel._on_frame(frame)

    async def send(self, request_id: str, message: bytes, *, end: bool = False) -> None:
        await self.tunnel._on_frame(frames.data_frame(request_id, message, 1))
        if end:
            await self.tunnel._on_frame(frames.end_frame(request_id))

    async def next_message(self, request_id: str) -> bytes:
        async with asyncio.timeout(15):
            while True:
                frame = await self.tunnel._outgoing.get()
                if frame.request_id == request_id and frame.frame_type == frames.STREAM_DATA:
                    return bytes(frame.stream_data.encrypted.ciphertext)

    async def answer(self, request_id: str) -> tuple[list[bytes], tunnel_pb2.TunnelFrame]:
        """The daemon's messages for the call, and the frame that ended it (END or ERROR)."""
        messages: list[bytes] = []
        async with asyncio.timeout(15):
            while True:
                frame = await self.tunnel._outgoing.get()
                if frame.request_id != request_id:
                    continue
                if frame.frame_type == frames.STREAM_DATA:
                    messages.append(frame.stream_data.encrypted.ciphertext)
                elif frame.frame_type in (frames.STREAM_END, frames.ERROR):
                    return messages, frame

    async def unary(
        self, method: str, header: str | None, message: bytes, request_id: str = ""
    ) -> tuple[list[bytes], tunnel_pb2.TunnelFrame]:
        request_id = request_id or self.new_id()
        await self.open(request_id, method, header)
        await self.send(request_id, message, end=True)
        return await self.answer(request_id)


def refused(end: tunnel_pb2.TunnelFrame, code: grpc.StatusCode, why: str) -> bool:
    return (
        end.frame_type == frames.ERROR
        and frames.error_status(end.error) == code
        and why in end.error.message
    )


@dataclass
class Machine:
    certs: MachineIdentity
    stand_in: StandIn
    socket: Path
    relay: RelaySide = field(init=False)
    identity: DaemonIdentity = field(init=False)

    def start_daemon(self, *, allow_unencrypted: bool = False) -> RelaySide:
        """A daemon (re)started: its identity from its files, its memory fresh."""
        self.identity = DaemonIdentity.load_or_create(
            self.certs.e2e_key_file, self.certs.e2e_replay_file
        )
        tunnel = TunnelClient(
            TunnelSettings(
                relay_urls=["https://127.0.0.1:1"],
                identity=self.certs,
                local_target=f"unix:{self.socket}",
                e2e=self.identity,
                allow_unencrypted=allow_unencrypted,
            )
        )
        tunnel._local = grpc.aio.insecure_channel(f"unix:{self.socket}")
        self.relay = RelaySide(tunnel)
        return self.relay

    async def close(self) -> None:
        assert self.relay.tunnel._local is not None
        self.relay.tunnel._end_calls()
        await self.relay.tunnel._local.close()


@pytest.fixture
async def machine(tmp_path: Path) -> AsyncIterator[Machine]:
    stand_in = StandIn()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "betcode.v1.AgentService",
                {
                    "RenameSession": stand_in.unary(RENAME),
                    "DeleteSession": stand_in.unary(DELETE),
                    "Converse": stand_in.echo(CONVERSE),
                },
            ),
        )
    )
    socket = tmp_path / "daemon.sock"
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    machine = Machine(MachineIdentity(tmp_path / "certs"), stand_in, socket)
    machine.start_daemon()
    try:
        yield machine
    finally:
        await machine.close()
        await server.stop(None)


async def online_session(relay: RelaySide, daemon_identity: bytes) -> ClientSession:
    """ExchangeKeys through the tunnel, as a client does through the relay."""
    handshake = ClientHandshake()
    messages, end = await relay.unary(
        EXCHANGE_KEYS, None, handshake.request("box").SerializeToString()
    )
    assert end.frame_type == frames.STREAM_END
    response = tunnel_pb2.KeyExchangeResponse.FromString(messages[0])
    assert bytes(response.daemon_identity_pubkey) == daemon_identity
    return handshake.complete(bytes(response.daemon_ephemeral_pubkey), daemon_identity)


async def test_a_relayed_call_without_end_to_end_encryption_is_refused(
    machine: Machine, caplog: pytest.LogCaptureFixture
) -> None:
    _messages, end = await machine.relay.unary(RENAME, None, b"rename-in-the-clear")
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "only end-to-end encrypted")
    assert machine.stand_in.reached == []
    # A malformed or unknown scheme is no way around it either.
    for header in ("1;whatever", "2;c=1", "2;s=00;c=1", "abcdef"):
        _messages, end = await machine.relay.unary(RENAME, header, b"rename")
        assert refused(end, grpc.StatusCode.UNAUTHENTICATED, ""), header
    assert machine.stand_in.reached == []

    # The setting lets it through, loudly.
    await machine.close()
    relay = machine.start_daemon(allow_unencrypted=True)
    with caplog.at_level(logging.WARNING, logger="betcode.tunnel.client"):
        messages, end = await relay.unary(RENAME, None, b"rename-in-the-clear")
    assert end.frame_type == frames.STREAM_END
    assert messages == [b"done:rename-in-the-clear"]
    assert "WITHOUT end-to-end encryption" in caplog.text


async def test_replayed_and_moved_frames_are_refused(machine: Machine) -> None:
    relay = machine.relay
    session = await online_session(relay, machine.identity.public)
    assert session.forward_secret

    header, cipher = session.next_call(RENAME)
    captured = cipher.seal(b"rename-to-x")
    messages, end = await relay.unary(RENAME, header, captured)
    assert end.frame_type == frames.STREAM_END
    assert cipher.open(messages[0]) == b"done:rename-to-x"
    assert machine.stand_in.reached == [(RENAME, b"rename-to-x")]

    # The whole call again, as captured (its header and message), under a new request id.
    _messages, end = await relay.unary(RENAME, header, captured)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "already made (replay)")
    # The captured message in a later call of the same method, and of another method.
    for method in (RENAME, DELETE):
        later, _cipher = session.next_call(method)
        _messages, end = await relay.unary(method, later, captured)
        assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "failed to decrypt"), method
    # A response of one call opened as another's, or as a request: refused by the client.
    _header, other = session.next_call(RENAME)
    with pytest.raises(Exception, match="failed to decrypt"):
        other.open(messages[0])
    assert machine.stand_in.reached == [(RENAME, b"rename-to-x")]


async def test_a_repeated_or_reordered_message_within_a_call_is_refused(machine: Machine) -> None:
    relay = machine.relay
    session = await online_session(relay, machine.identity.public)

    header, cipher = session.next_call(CONVERSE)
    request_id = relay.new_id()
    await relay.open(request_id, CONVERSE, header)
    first = cipher.seal(b"message-0")
    await relay.send(request_id, first)
    assert cipher.open(await relay.next_message(request_id)) == b"echo:message-0"
    await relay.send(request_id, first)  # the relay repeats it
    _messages, end = await relay.answer(request_id)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "failed to decrypt")
    assert machine.stand_in.reached == [(CONVERSE, b"message-0")]

    header, cipher = session.next_call(CONVERSE)
    request_id = relay.new_id()
    await relay.open(request_id, CONVERSE, header)
    sealed = [cipher.seal(f"m{n}".encode()) for n in range(3)]
    await relay.send(request_id, sealed[0])
    assert cipher.open(await relay.next_message(request_id)) == b"echo:m0"
    for message in (sealed[2], sealed[1]):  # reordered
        await relay.send(request_id, message)
    _messages, end = await relay.answer(request_id)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "failed to decrypt")
    assert machine.stand_in.reached[1:] == [(CONVERSE, b"m0")]


async def test_a_buffered_request_replayed_after_delivery_is_refused(machine: Machine) -> None:
    """A sealed call (made for an offline machine, kept in the relay's buffer): delivered
    once; the same frames later — also after the daemon restarted — run nothing."""
    session = ClientSession.sealed(machine.identity.public)
    assert not session.forward_secret
    header, cipher = session.next_call(RENAME)
    captured = cipher.seal(b"buffered-rename")
    messages, end = await machine.relay.unary(RENAME, header, captured)
    assert end.frame_type == frames.STREAM_END
    assert cipher.open(messages[0]) == b"done:buffered-rename"

    _messages, end = await machine.relay.unary(RENAME, header, captured)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "already ran (replay)")
    await machine.close()
    relay = machine.start_daemon()  # restarted: the record of sealed calls is on disk
    _messages, end = await relay.unary(RENAME, header, captured)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "already ran (replay)")
    # The session's next call still works: only what ran is refused.
    header, cipher = session.next_call(RENAME)
    messages, end = await relay.unary(RENAME, header, cipher.seal(b"second"))
    assert cipher.open(messages[0]) == b"done:second"
    assert machine.stand_in.reached == [(RENAME, b"buffered-rename"), (RENAME, b"second")]


async def test_a_buffered_request_opened_but_never_answered_runs_when_delivered_again(
    machine: Machine,
) -> None:
    """The relay delivers a buffered request again when the daemon never answered it: the tunnel
    dropped, or the daemon died, after the sealed call was opened (its replay record written)
    and before the request reached the daemon. That delivery runs it, once; while an opening
    runs, under another method, or once the daemon answered, the same call is refused."""
    session = ClientSession.sealed(machine.identity.public)
    header, cipher = session.next_call(RENAME)
    captured = cipher.seal(b"buffered-rename")
    relay = machine.relay
    opening = relay.new_id()
    await relay.open(opening, RENAME, header)
    _messages, end = await relay.unary(RENAME, header, captured)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "already ran (replay)")  # it runs
    task = relay.tunnel._call_tasks[opening]
    relay.tunnel._end_calls()  # the tunnel dropped before the request came
    with contextlib.suppress(asyncio.CancelledError):
        await task
    again = relay.new_id()
    await relay.open(again, RENAME, header)  # the same process, a new tunnel: accepted
    await machine.close()  # and the daemon dies before the request came
    relay = machine.start_daemon()
    _messages, end = await relay.unary(DELETE, header, captured)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "already ran (replay)")
    assert machine.stand_in.reached == []

    messages, end = await relay.unary(RENAME, header, captured)
    assert end.frame_type == frames.STREAM_END
    assert cipher.open(messages[0]) == b"done:buffered-rename"
    _messages, end = await relay.unary(RENAME, header, captured)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "already ran (replay)")
    await machine.close()
    relay = machine.start_daemon()
    _messages, end = await relay.unary(RENAME, header, captured)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "already ran (replay)")
    assert machine.stand_in.reached == [(RENAME, b"buffered-rename")]


async def test_a_buffered_request_that_reached_the_daemon_is_not_run_again_by_the_same_one(
    machine: Machine,
) -> None:
    """A relay that cuts a sealed call short after its request went in, before the answer that
    counts, and delivers it again, is refused by that daemon process: it may have run it. Only
    a daemon that died meanwhile (which the relay cannot cause) opens it again."""
    session = ClientSession.sealed(machine.identity.public)
    header, cipher = session.next_call(CONVERSE)
    captured = cipher.seal(b"recorded-message")
    relay = machine.relay
    first = relay.new_id()
    await relay.open(first, CONVERSE, header, until_recorded=True)
    await relay.send(first, captured)
    assert cipher.open(await relay.next_message(first)) == b"echo:recorded-message"
    task = relay.tunnel._call_tasks[first]
    relay.tunnel._end_calls()  # cut short before its end: never taken
    with contextlib.suppress(asyncio.CancelledError):
        await task
    again = relay.new_id()
    await relay.open(again, CONVERSE, header, until_recorded=True)
    _messages, end = await relay.answer(again)
    assert refused(end, grpc.StatusCode.UNAUTHENTICATED, "already ran (replay)")
    assert machine.stand_in.reached == [(CONVERSE, b"recorded-message")]

    await machine.close()  # a daemon that died: the next one takes the delivery again
    relay = machine.start_daemon()
    after = relay.new_id()
    await relay.open(after, CONVERSE, header, until_recorded=True)
    await relay.send(after, captured, end=True)
    _messages, end = await relay.answer(after)
    assert end.frame_type == frames.STREAM_END
    # Twice at the stand-in; a real daemon takes the second as a no-op by its idempotency key.
    assert machine.stand_in.reached == [(CONVERSE, b"recorded-message")] * 2


async def test_a_session_the_daemon_forgot_asks_for_a_new_one(machine: Machine) -> None:
    """Online sessions live in the daemon's memory only (forward secrecy): after a restart the
    client is told to make a new one (UNAVAILABLE, retryable), and nothing ran."""
    session = await online_session(machine.relay, machine.identity.public)
    await machine.close()
    relay = machine.start_daemon()
    header, cipher = session.next_call(RENAME)
    _messages, end = await relay.unary(RENAME, header, cipher.seal(b"after-restart"))
    assert refused(end, grpc.StatusCode.UNAVAILABLE, UNKNOWN_SESSION)
    session = await online_session(relay, machine.identity.public)
    header, cipher = session.next_call(RENAME)
    messages, end = await relay.unary(RENAME, header, cipher.seal(b"after-restart"))
    assert cipher.open(messages[0]) == b"done:after-restart"
    assert machine.stand_in.reached == [(RENAME, b"after-restart")]


def test_call_ciphers_bind_call_direction_counter_and_method() -> None:
    """The associated data, cipher by cipher: what each side refuses without a daemon."""
    handshake = ClientHandshake()
    identity = DaemonIdentity(X25519PrivateKey.generate())
    request = handshake.request("box").SerializeToString()
    response = tunnel_pb2.KeyExchangeResponse.FromString(identity.exchange(request))
    session = handshake.complete(bytes(response.daemon_ephemeral_pubkey), identity.public)
    header, client = session.next_call(RENAME)
    daemon_side = identity.open_call(header, RENAME)
    sealed = client.seal(b"x")
    assert daemon_side.open(sealed) == b"x"
    with pytest.raises(Exception, match="failed to decrypt"):
        daemon_side.open(sealed)  # counter moved on
    echo = daemon_side.seal(b"y")
    with pytest.raises(Exception, match="failed to decrypt"):
        CallCipher.open(daemon_side, echo)  # a response is not a request
    assert client.open(echo) == b"y"
