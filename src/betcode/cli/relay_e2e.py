"""The client's end of end-to-end encryption over the relay: the daemon's identity key, pinned
on first use in ``<config dir>/known_machines.json`` (a changed one is refused, loudly, until
`machine trust` re-pins it), a session with the daemon (remote/e2e.py), and a channel whose
every call is sealed in that session."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import click
import grpc
import grpc.aio

from betcode.config.dirs import config_dir
from betcode.remote.e2e import (
    E2E_METADATA_KEY,
    KEY_BYTES,
    UNKNOWN_SESSION,
    ClientHandshake,
    ClientSession,
    E2EError,
    fingerprint,
)
from betcode.remote.owner_only import write_private
from betcode.v1 import agent_pb2_grpc

KNOWN_MACHINES = "known_machines.json"


class FingerprintChanged(click.ClickException):
    exit_code = 3


def _known_file() -> Any:
    return config_dir() / KNOWN_MACHINES


def _known() -> dict[str, str]:
    try:
        data = json.loads(_known_file().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


async def open_session(
    channel: grpc.aio.Channel, machine_id: str, metadata: tuple[tuple[str, str], ...]
) -> ClientSession:
    """An end-to-end session with the machine: online, a forward-secret one from ExchangeKeys
    (the daemon's identity checked against the pinned fingerprint, pinned now if this is the
    first time); offline, one sealed to the pinned identity (requests can still be buffered,
    encrypted)."""
    known = _known()
    pinned = known.get(machine_id)
    handshake = ClientHandshake()
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    try:
        response = await stub.ExchangeKeys(
            handshake.request(machine_id), metadata=metadata, timeout=30
        )
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.UNAVAILABLE and pinned:
            return ClientSession.sealed(bytes.fromhex(pinned))
        raise
    key = bytes(response.daemon_identity_pubkey)
    if len(key) != KEY_BYTES:
        raise click.ClickException(f"machine {machine_id} sent no end-to-end identity key")
    if pinned is None:
        known[machine_id] = key.hex()
        write_private(_known_file(), json.dumps(known, indent=2).encode())
        print(
            f"note: pinned machine {machine_id}'s key, fingerprint {fingerprint(key)}"
            " (`betcode daemon status` on the machine shows it)",
            file=sys.stderr,
        )
    elif pinned != key.hex():
        raise FingerprintChanged(
            f"THE END-TO-END KEY OF MACHINE {machine_id} HAS CHANGED "
            f"(pinned {fingerprint(bytes.fromhex(pinned))}, now {fingerprint(key)}). "
            "Someone may be intercepting the relay. Refusing to connect. If the machine's key "
            "changed on purpose, check the fingerprint `betcode daemon status` shows on the "
            f"machine and run `betcode machine trust {machine_id} --fingerprint FINGERPRINT`."
        )
    if len(response.daemon_ephemeral_pubkey) != KEY_BYTES:
        raise click.ClickException(
            f"machine {machine_id} runs a daemon without forward-secret end-to-end sessions; "
            "update it"
        )
    try:
        return handshake.complete(bytes(response.daemon_ephemeral_pubkey), key)
    except E2EError as error:
        raise click.ClickException(f"machine {machine_id}: {error}") from None


def trust(machine_id: str, public_key: bytes) -> None:
    """Pins ``public_key`` for the machine (after a person checked its fingerprint)."""
    known = _known()
    known[machine_id] = public_key.hex()
    write_private(_known_file(), json.dumps(known, indent=2).encode())


class _SealedCall:
    """A method of an EncryptingChannel: each invocation is a call with its own number and
    cipher (the messages' counters start again), its header added to the metadata."""

    def __init__(self, owner: EncryptingChannel, kind: str, method: str, options: Any) -> None:
        self._owner = owner
        self._kind = kind
        self._method = method
        self._options = options

    def __call__(self, *args: Any, metadata: Any = None, **kwargs: Any) -> Any:
        header, cipher = self._owner.session.next_call(self._method)
        serializer = self._options.get("request_serializer")
        deserializer = self._options.get("response_deserializer")

        def seal(message: Any) -> bytes:
            return cipher.seal(serializer(message) if serializer is not None else message)

        def open_(data: bytes) -> Any:
            plain = cipher.open(data)
            return deserializer(plain) if deserializer is not None else plain

        options = {**self._options, "request_serializer": seal, "response_deserializer": open_}
        multicallable = getattr(self._owner.raw, self._kind)(self._method, **options)
        call = multicallable(
            *args, metadata=(*(metadata or ()), (E2E_METADATA_KEY, header)), **kwargs
        )
        call.add_done_callback(self._owner.watch)
        return call


class EncryptingChannel:
    """A grpc.aio channel whose calls seal each request and open each response; stubs are made
    on it exactly as on a plain channel. When the daemon has forgotten the session (it
    restarted), a new one is made (``rekey``) for the calls after."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        session: ClientSession,
        rekey: Callable[[], Awaitable[ClientSession]] | None = None,
    ) -> None:
        self.raw = channel
        self.session = session
        self._rekey = rekey
        self._rekeying: asyncio.Task[None] | None = None

    def watch(self, call: Any) -> None:
        if self._rekey is not None and (self._rekeying is None or self._rekeying.done()):
            self._rekeying = asyncio.ensure_future(self._rekey_if_unknown(call, self._rekey))

    async def _rekey_if_unknown(
        self, call: Any, rekey: Callable[[], Awaitable[ClientSession]]
    ) -> None:
        if await call.code() != grpc.StatusCode.UNAVAILABLE:
            return
        if UNKNOWN_SESSION not in (await call.details() or ""):
            return
        with contextlib.suppress(grpc.RpcError, click.ClickException):
            self.session = await rekey()

    def unary_unary(self, method: str, **options: Any) -> Any:
        return _SealedCall(self, "unary_unary", method, options)

    def unary_stream(self, method: str, **options: Any) -> Any:
        return _SealedCall(self, "unary_stream", method, options)

    def stream_unary(self, method: str, **options: Any) -> Any:
        return _SealedCall(self, "stream_unary", method, options)

    def stream_stream(self, method: str, **options: Any) -> Any:
        return _SealedCall(self, "stream_stream", method, options)

    async def close(self, grace: float | None = None) -> None:
        if self._rekeying is not None:
            self._rekeying.cancel()
        await self.raw.close(grace)
