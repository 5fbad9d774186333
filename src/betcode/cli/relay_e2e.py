"""The client's end of end-to-end encryption over the relay: the daemon's identity key, pinned
on first use in ``<config dir>/known_machines.json`` (a changed one is refused, loudly), and a
channel whose every message is sealed for that daemon (remote/e2e.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click
import grpc
import grpc.aio

from betcode.config.dirs import config_dir
from betcode.remote.e2e import ClientSession, fingerprint
from betcode.remote.owner_only import write_private
from betcode.v1 import agent_pb2_grpc, tunnel_pb2

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


async def daemon_identity(
    channel: grpc.aio.Channel, machine_id: str, metadata: tuple[tuple[str, str], ...]
) -> bytes:
    """The machine's identity public key: asked through the relay, checked against the pinned
    fingerprint (pinned now if this is the first time). When the machine is offline, the
    pinned key is used as it is (requests can still be buffered, encrypted)."""
    known = _known()
    pinned = known.get(machine_id)
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    try:
        response = await stub.ExchangeKeys(
            tunnel_pb2.KeyExchangeRequest(machine_id=machine_id), metadata=metadata, timeout=30
        )
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.UNAVAILABLE and pinned:
            return bytes.fromhex(pinned)
        raise
    key = bytes(response.daemon_identity_pubkey)
    if len(key) != 32:
        raise click.ClickException(f"machine {machine_id} sent no end-to-end identity key")
    if pinned is None:
        known[machine_id] = key.hex()
        write_private(_known_file(), json.dumps(known, indent=2).encode())
        print(
            f"note: pinned machine {machine_id}'s key, fingerprint {fingerprint(key)}",
            file=sys.stderr,
        )
    elif pinned != key.hex():
        raise FingerprintChanged(
            f"THE END-TO-END KEY OF MACHINE {machine_id} HAS CHANGED "
            f"(pinned {fingerprint(bytes.fromhex(pinned))}, now {fingerprint(key)}). "
            "Someone may be intercepting the relay. Refusing to connect. If the machine was "
            f"reinstalled on purpose, remove its entry from {_known_file()}."
        )
    return key


def _sealed(
    session: ClientSession, method: str, serializer: Callable[[Any], bytes] | None
) -> Callable[[Any], bytes]:
    name = method.lstrip("/")

    def seal(message: Any) -> bytes:
        data = serializer(message) if serializer is not None else message
        return session.seal(name, data)

    return seal


def _opened(
    session: ClientSession, method: str, deserializer: Callable[[bytes], Any] | None
) -> Callable[[bytes], Any]:
    name = method.lstrip("/")

    def open_(data: bytes) -> Any:
        plain = session.open(name, data)
        return deserializer(plain) if deserializer is not None else plain

    return open_


class EncryptingChannel:
    """A grpc.aio channel whose calls seal each request and open each response; stubs are made
    on it exactly as on a plain channel."""

    def __init__(self, channel: grpc.aio.Channel, session: ClientSession) -> None:
        self._channel = channel
        self._session = session

    def _wrap(self, kind: str, method: str, **options: Any) -> Any:
        options["request_serializer"] = _sealed(
            self._session, method, options.get("request_serializer")
        )
        options["response_deserializer"] = _opened(
            self._session, method, options.get("response_deserializer")
        )
        return getattr(self._channel, kind)(method, **options)

    def unary_unary(self, method: str, **options: Any) -> Any:
        return self._wrap("unary_unary", method, **options)

    def unary_stream(self, method: str, **options: Any) -> Any:
        return self._wrap("unary_stream", method, **options)

    def stream_unary(self, method: str, **options: Any) -> Any:
        return self._wrap("stream_unary", method, **options)

    def stream_stream(self, method: str, **options: Any) -> Any:
        return self._wrap("stream_stream", method, **options)

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)
