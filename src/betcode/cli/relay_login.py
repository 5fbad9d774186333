"""The client's relay session: where the relay is (the global ``--relay``,
``--relay-custom-ca-cert`` and ``--machine`` options, else what was stored at login), the
stored tokens in ``<config dir>/auth.json`` (0600, SEC-09's file fallback), and a fresh access
token (refreshed, with rotation, shortly before it expires)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import grpc
import grpc.aio

from betcode.config.dirs import config_dir
from betcode.remote.frames import relay_target
from betcode.remote.owner_only import write_private
from betcode.v1 import auth_pb2, auth_pb2_grpc

log = logging.getLogger(__name__)

REFRESH_MARGIN_SECONDS = 60
RETRY_REFRESH_SECONDS = 5.0
AUTH_FILE = "auth.json"
AUTH_LOCK = "auth.json.lock"
AUTHORIZATION_METADATA_KEY = "authorization"
MACHINE_ID_METADATA_KEY = "x-machine-id"


class NotLoggedIn(click.ClickException):
    exit_code = 3


def auth_file() -> Path:
    return config_dir() / AUTH_FILE


@dataclass
class StoredLogin:
    relay_url: str = ""
    ca_file: str = ""
    user_id: str = ""
    username: str = ""
    access_token: str = ""
    refresh_token: str = ""
    access_expires_at: float = 0.0
    access_refresh_at: float = 0.0  # when to refresh: before it expires
    active_machine: str = ""

    @classmethod
    def load(cls) -> StoredLogin:
        try:
            data = json.loads(auth_file().read_text())
        except (OSError, ValueError):
            return cls()
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self) -> None:
        write_private(auth_file(), json.dumps(self.__dict__, indent=2).encode())

    def set_tokens(self, access: str, refresh: str, expires_in: int) -> None:
        now = time.time()
        self.access_token = access
        self.refresh_token = refresh
        self.access_expires_at = now + expires_in
        self.access_refresh_at = now + expires_in - min(REFRESH_MARGIN_SECONDS, expires_in / 3)

    @property
    def fresh(self) -> bool:
        refresh_at = self.access_refresh_at or self.access_expires_at - REFRESH_MARGIN_SECONDS
        return bool(self.access_token) and time.time() < refresh_at


@dataclass(frozen=True)
class RelayChoice:
    url: str
    ca_file: Path | None
    machine_id: str


def global_options() -> dict[str, Any]:
    context = click.get_current_context(silent=True)
    if context is None:
        return {}
    obj = context.find_root().obj
    return obj if isinstance(obj, dict) else {}


def relay_choice(*, need_machine: bool) -> RelayChoice | None:
    """The relay to go through, or None for the local daemon: only when ``--relay`` or
    ``--machine`` is given (a stored login alone never moves a command off this machine)."""
    options = global_options()
    url = options.get("relay") or ""
    machine = options.get("machine") or ""
    if not url and not machine:
        return None
    stored = StoredLogin.load()
    url = url or stored.relay_url
    if not url:
        raise click.UsageError("--machine needs a relay: give --relay URL (or log in first)")
    ca = options.get("relay_ca") or stored.ca_file or None
    machine = machine or stored.active_machine
    if need_machine and not machine:
        raise click.UsageError(
            "no machine chosen: give --machine ID or run `betcode machine switch ID`"
        )
    return RelayChoice(url, Path(ca) if ca else None, machine)


def machine_directory(
    _context: click.Context, _param: click.Parameter, value: str | None
) -> str | None:
    """`--cwd`: a directory on the daemon's machine. Checked here only when the daemon is this
    machine's; through a relay it is a path on that machine, which its daemon checks (a folder
    that exists only there is fine, one that does not is refused there)."""
    if value is None:
        return None
    if relay_choice(need_machine=False) is not None:
        if not os.path.isabs(value):
            raise click.BadParameter("through a relay, give an absolute path on the machine")
        return value
    if not os.path.isdir(value):
        raise click.BadParameter(f"directory {value!r} does not exist")
    return value


def relay_unreachable(choice: RelayChoice, details: str) -> str:
    """What to tell a user whose relay connection failed before any call got through: most
    often a wrong address, such as the relay's daemon-only port (it wants a machine
    certificate, so TLS ends before anything is said)."""
    return (
        f"cannot reach the relay at {choice.url} ({details}): is it running, and is this the "
        "address `betcode relay start` printed for clients (not its daemon-only port)?"
    )


def relay_channel(choice: RelayChoice) -> grpc.aio.Channel:
    root = choice.ca_file.read_bytes() if choice.ca_file else None
    return grpc.aio.secure_channel(
        relay_target(choice.url),
        grpc.ssl_channel_credentials(root_certificates=root),
        options=[
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ],
    )


def _locked_auth_file() -> int:
    """Waits for, and takes, the lock on auth.json (blocking: run it in a thread). Commands
    refreshing at once share one refresh: the refresh token rotates, and a second use of the
    old one would revoke the whole login."""
    auth_file().parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(config_dir() / AUTH_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    return descriptor


async def access_token(channel: grpc.aio.Channel, choice: RelayChoice) -> str:
    """The stored access token, refreshed (and the refresh token rotated) when it is about to
    expire. NotLoggedIn when there is no usable login for this relay."""
    stored = _login_for(choice)
    if stored.fresh:
        return stored.access_token
    lock = await asyncio.to_thread(_locked_auth_file)
    try:
        stored = _login_for(choice)  # another command may have refreshed it meanwhile
        if stored.fresh:
            return stored.access_token
        stub = auth_pb2_grpc.AuthServiceStub(channel)
        try:
            fresh = await stub.RefreshToken(
                auth_pb2.RefreshTokenRequest(refresh_token=stored.refresh_token), timeout=30
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise NotLoggedIn(f"{error.details()}; run `betcode auth login` again") from None
            raise
        stored.set_tokens(fresh.access_token, fresh.refresh_token, fresh.expires_in_secs)
        stored.save()
        return stored.access_token
    finally:
        os.close(lock)


def _login_for(choice: RelayChoice) -> StoredLogin:
    stored = StoredLogin.load()
    if not stored.refresh_token or relay_target(stored.relay_url) != relay_target(choice.url):
        raise NotLoggedIn(
            f"not logged in to {choice.url}: run `betcode --relay {choice.url} auth login`"
        )
    return stored


class RelayAuth:
    """The relay metadata of a long-lived client (a chat, a followed run): its access token is
    renewed before it expires, so calls made hours later still carry a valid one."""

    def __init__(self, channel: grpc.aio.Channel, choice: RelayChoice, token: str) -> None:
        self._channel = channel
        self._choice = choice
        self._token = token
        self._renewing: asyncio.Task[None] | None = None

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (
            ("authorization", f"Bearer {self._token}"),
            ("x-machine-id", self._choice.machine_id),
        )

    def start(self) -> None:
        self._renewing = asyncio.create_task(self._renew())

    async def _renew(self) -> None:
        while True:
            stored = StoredLogin.load()
            await asyncio.sleep(max(1.0, stored.access_refresh_at - time.time()))
            try:
                self._token = await access_token(self._channel, self._choice)
            except NotLoggedIn:
                return  # its calls say so (UNAUTHENTICATED)
            except (grpc.aio.AioRpcError, OSError) as error:
                log.warning("could not renew the relay access token: %s", error)
                await asyncio.sleep(RETRY_REFRESH_SECONDS)

    async def close(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
