"""AuthService (register, login, refresh with rotation, revoke; a device paired with a ticket,
the device logins listed and revoked) and the check every other relay call starts with: the
caller's ``authorization: Bearer <jwt>``."""

from __future__ import annotations

import asyncio
import collections
import enum
import hashlib
import hmac
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from google.protobuf.timestamp_pb2 import Timestamp

from betcode.relay.accounts import (
    Accounts,
    DeviceLogin,
    InviteRefused,
    NotFirstUser,
    UserExists,
)
from betcode.relay.front import SplicedPeers
from betcode.relay.pairing import Pairing, TicketRefused, TooManyWrongTickets
from betcode.relay.tokens import Claims, InvalidToken, TokenIssuer
from betcode.v1 import auth_pb2, auth_pb2_grpc

USERNAME = re.compile(r"^[A-Za-z0-9._-]{3,64}$")
MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024
AUTHORIZATION_KEY = "authorization"
# SEC-12: registration and login, 10 a minute per client address (a gRPC client comes through
# the front door's splice: its real address is the splice's, by SplicedPeers).
ATTEMPTS_PER_MINUTE = 10
# The relay's web front (relay/web.py) logs browsers in through this service on loopback: it
# names the browser's address, proven by a secret made at each start, so that each browser is
# counted apart rather than all as the front's one loopback address.
FRONT_SECRET_KEY = "x-betcode-front"
FORWARDED_KEY = "x-betcode-forwarded-for"


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> Any:
    await context.abort(code, message)


async def caller_claims(context: grpc.aio.ServicerContext, issuer: TokenIssuer) -> Claims:
    """The verified claims of the call's bearer token; aborts UNAUTHENTICATED otherwise."""
    token = bearer_token(context.invocation_metadata() or ())
    if token is None:
        await abort(context, grpc.StatusCode.UNAUTHENTICATED, "no `authorization: Bearer <token>`")
        raise AssertionError  # abort raises
    try:
        return await issuer.verify(token)
    except InvalidToken as error:
        await abort(context, grpc.StatusCode.UNAUTHENTICATED, str(error))
        raise AssertionError from None


def bearer_token(metadata: Any) -> str | None:
    for key, value in metadata:
        if key == AUTHORIZATION_KEY and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token:
                return token.strip()
    return None


class AttemptLimiter:
    """At most ``per_minute`` attempts per key in any sliding minute (held in memory: each
    relay instance counts its own)."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._per_minute = per_minute
        self._clock = clock
        self._attempts: dict[str, collections.deque[float]] = {}

    def allow(self, key: str) -> float:
        """0 when allowed (and counted), else the seconds until the next attempt may be made."""
        now = self._clock()
        attempts = self._attempts.setdefault(key, collections.deque())
        while attempts and attempts[0] <= now - 60:
            attempts.popleft()
        if len(attempts) >= self._per_minute:
            return attempts[0] + 60 - now
        attempts.append(now)
        return 0.0


class Registration(enum.StrEnum):
    """Who may create an account: anyone (open), the first account freely and the others with
    an invitation code (invite), nobody (closed)."""

    OPEN = "open"
    INVITE = "invite"
    CLOSED = "closed"


def invite_hash(code: str) -> str:
    """Invitation codes are kept hashed: the accounts database does not give them away."""
    return hashlib.sha256(code.strip().encode()).hexdigest()


class AuthService(auth_pb2_grpc.AuthServiceServicer):
    def __init__(
        self,
        accounts: Accounts,
        issuer: TokenIssuer,
        registration: Registration = Registration.INVITE,
        front_secret: str = "",
        peers: SplicedPeers | None = None,
    ) -> None:
        self._accounts = accounts
        self._peers = peers or SplicedPeers()
        self._front_secret = front_secret
        self._issuer = issuer
        self._registration = registration
        self._hasher = PasswordHasher()  # argon2id, memory-hard
        self._limiter = AttemptLimiter(ATTEMPTS_PER_MINUTE)
        self._pairing = Pairing(accounts, issuer)
        # Tells the machine that one of its device logins was revoked (relay/tunnels.py).
        self.device_revoked: Callable[[str, str], Awaitable[None]] | None = None

    def _client_address(self, context: grpc.aio.ServicerContext) -> str:
        metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}
        proof = metadata.get(FRONT_SECRET_KEY, "")
        if self._front_secret and hmac.compare_digest(proof, self._front_secret):
            return "browser:" + metadata.get(FORWARDED_KEY, "")
        return self._peers.client_address(str(context.peer()))

    async def _limit(self, context: grpc.aio.ServicerContext) -> None:
        wait = self._limiter.allow(self._client_address(context))
        if wait:
            context.set_trailing_metadata((("retry-after-ms", str(int(wait * 1000))),))
            await abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many attempts from this address; try again in {wait:.0f} s",
            )

    async def Register(
        self, request: auth_pb2.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.RegisterResponse:
        await self._limit(context)
        if not USERNAME.match(request.username):
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "username: 3-64 characters of letters, digits, '.', '_' or '-'",
            )
        if not MIN_PASSWORD_CHARS <= len(request.password) <= MAX_PASSWORD_CHARS:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"password: at least {MIN_PASSWORD_CHARS} characters",
            )
        if self._registration == Registration.CLOSED:
            await abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "registration is closed on this relay; ask its operator for an account",
            )
        password_hash = await asyncio.to_thread(self._hasher.hash, request.password)
        user_id = uuid.uuid4().hex
        await self._create(context, request, user_id, password_hash)
        user = await self._accounts.user_by_id(user_id)
        assert user is not None
        pair = await self._issuer.issue(user)
        return auth_pb2.RegisterResponse(
            user_id=user_id,
            access_token=pair.access_token,
            refresh_token=pair.refresh_token,
            expires_in_secs=pair.expires_in_secs,
        )

    async def _create(
        self,
        context: grpc.aio.ServicerContext,
        request: auth_pb2.RegisterRequest,
        user_id: str,
        password_hash: str,
    ) -> None:
        """Creates the account as the registration mode allows; aborts saying why not."""
        now = time.time()
        account = (user_id, request.username, request.email, password_hash, now)
        code = request.invite_code.strip()
        invited = self._registration == Registration.INVITE and bool(code)
        if invited:
            try:
                await self._accounts.use_invite(invite_hash(code), now)
            except InviteRefused:
                await abort(
                    context,
                    grpc.StatusCode.PERMISSION_DENIED,
                    "the invitation code is unknown, expired or used up",
                )
        try:
            first_only = self._registration == Registration.INVITE and not invited
            await self._accounts.create_user(*account, only_if_first=first_only)
        except NotFirstUser:
            await abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "this relay registers by invitation: ask its owner for a code "
                "(`betcode relay invite` on the relay) and give it with --invite",
            )
        except UserExists:
            if invited:
                await self._accounts.give_back_invite(invite_hash(code))
            await abort(
                context, grpc.StatusCode.ALREADY_EXISTS, f"user {request.username!r} exists"
            )

    async def Login(
        self, request: auth_pb2.LoginRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.LoginResponse:
        await self._limit(context)
        user = await self._accounts.user_by_name(request.username)
        if user is None or not await self._password_matches(user.password_hash, request.password):
            await abort(context, grpc.StatusCode.UNAUTHENTICATED, "wrong username or password")
            raise AssertionError
        if self._hasher.check_needs_rehash(user.password_hash):
            new_hash = await asyncio.to_thread(self._hasher.hash, request.password)
            await self._accounts.set_password_hash(user.id, new_hash)
        pair = await self._issuer.issue(user)
        return auth_pb2.LoginResponse(
            access_token=pair.access_token,
            refresh_token=pair.refresh_token,
            expires_in_secs=pair.expires_in_secs,
            user_id=user.id,
        )

    async def _password_matches(self, password_hash: str, password: str) -> bool:
        try:
            return bool(await asyncio.to_thread(self._hasher.verify, password_hash, password))
        except (VerificationError, InvalidHashError):
            return False

    async def RefreshToken(
        self, request: auth_pb2.RefreshTokenRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.RefreshTokenResponse:
        try:
            pair = await self._issuer.rotate(request.refresh_token)
        except InvalidToken as error:
            await abort(context, grpc.StatusCode.UNAUTHENTICATED, str(error))
            raise AssertionError from None
        return auth_pb2.RefreshTokenResponse(
            access_token=pair.access_token,
            refresh_token=pair.refresh_token,
            expires_in_secs=pair.expires_in_secs,
        )

    async def RevokeToken(
        self, request: auth_pb2.RevokeTokenRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.RevokeTokenResponse:
        return auth_pb2.RevokeTokenResponse(
            revoked=await self._issuer.revoke(request.refresh_token)
        )

    async def PairDevice(
        self, request: auth_pb2.PairDeviceRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.PairDeviceResponse:
        try:
            device, pair = await self._pairing.pair(
                request.ticket, request.name, self._client_address(context)
            )
        except TooManyWrongTickets as refused:
            context.set_trailing_metadata(
                (("retry-after-ms", str(int(refused.retry_after * 1000))),)
            )
            await abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(refused))
            raise AssertionError from None
        except TicketRefused:
            await abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "this pairing ticket is wrong, used already or expired (tickets work once, for "
                "minutes): run `betcode web pair` on the machine for a new one",
            )
            raise AssertionError from None
        return auth_pb2.PairDeviceResponse(
            access_token=pair.access_token,
            refresh_token=pair.refresh_token,
            expires_in_secs=pair.expires_in_secs,
            user_id=device.owner_id,
            machine_id=device.machine_id,
            device_id=device.device_id,
        )

    async def ListDevices(
        self, request: auth_pb2.ListDevicesRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.ListDevicesResponse:
        claims = await caller_claims(context, self._issuer)
        devices = await self._accounts.devices_of(claims.user_id)
        return auth_pb2.ListDevicesResponse(devices=[_device_login(d) for d in devices])

    async def RevokeDevice(
        self, request: auth_pb2.RevokeDeviceRequest, context: grpc.aio.ServicerContext
    ) -> auth_pb2.RevokeDeviceResponse:
        claims = await caller_claims(context, self._issuer)
        machine_id = await self._accounts.revoke_device(
            request.device_id, claims.user_id, time.time()
        )
        if machine_id is None:
            await abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"no signed-in device {request.device_id!r} (`betcode auth devices` lists them)",
            )
        elif self.device_revoked is not None:
            await self.device_revoked(machine_id, request.device_id)
        return auth_pb2.RevokeDeviceResponse(revoked=True)


def timestamp(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _device_login(device: DeviceLogin) -> auth_pb2.DeviceLogin:
    login = auth_pb2.DeviceLogin(
        device_id=device.device_id,
        name=device.name,
        machine_id=device.machine_id,
        created_at=timestamp(device.created_at),
        last_used_at=timestamp(device.last_used_at),
    )
    if device.revoked_at is not None:
        login.revoked_at.CopyFrom(timestamp(device.revoked_at))
    return login
