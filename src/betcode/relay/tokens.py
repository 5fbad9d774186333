"""Access tokens (JWT, SEC-02 claims) and refresh tokens (opaque, stored hashed, rotated on
every use; a replayed refresh token revokes its whole family, which also ends every access
token issued from it). A device login (relay/pairing.py) is one family whose tokens carry the
one machine they reach (`machine_ids`), kept through every rotation."""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass

import jwt

from betcode.relay.accounts import Accounts, User

ISSUER = "betcode-relay"
AUDIENCE = "betcode"
ALGORITHM = "HS256"
ACCESS_TTL_SECONDS = 900  # 15 min
REFRESH_TTL_SECONDS = 7 * 24 * 3600  # 7 days


class InvalidToken(Exception):
    """Why a token was refused (shown to the caller; never names a secret)."""


@dataclass(frozen=True)
class TokenPair:
    access_token: str
    refresh_token: str
    expires_in_secs: int


@dataclass(frozen=True)
class Claims:
    user_id: str
    email: str
    family: str
    machine_ids: tuple[str, ...] | None  # None = every machine the user owns


def _hash(refresh_token: str) -> str:
    return hashlib.sha256(refresh_token.encode()).hexdigest()


class TokenIssuer:
    def __init__(
        self,
        accounts: Accounts,
        secret: bytes,
        *,
        access_ttl: int = ACCESS_TTL_SECONDS,
        refresh_ttl: int = REFRESH_TTL_SECONDS,
    ) -> None:
        self._accounts = accounts
        self._secret = secret
        self.access_ttl = access_ttl
        self.refresh_ttl = refresh_ttl

    def _access(
        self, user: User, family: str, now: float, machine_ids: tuple[str, ...] | None
    ) -> str:
        claims: dict[str, object] = {
            "sub": user.id,
            "email": user.email,
            "iss": ISSUER,
            "aud": AUDIENCE,
            "iat": int(now),
            "exp": int(now) + self.access_ttl,
            # The family prefix lets one revocation row end every access token of a login.
            "jti": f"{family}.{uuid.uuid4().hex}",
        }
        if machine_ids is not None:
            claims["machine_ids"] = list(machine_ids)
        return jwt.encode(claims, self._secret, algorithm=ALGORITHM)

    async def issue(
        self,
        user: User,
        family: str | None = None,
        machine_ids: tuple[str, ...] | None = None,
    ) -> TokenPair:
        """``machine_ids``: the machines the tokens reach (None: every one the user owns)."""
        now = time.time()
        family = family or uuid.uuid4().hex
        refresh = secrets.token_urlsafe(32)
        await self._accounts.add_refresh(_hash(refresh), user.id, family, now + self.refresh_ttl)
        access = self._access(user, family, now, machine_ids)
        return TokenPair(access, refresh, self.access_ttl)

    async def rotate(self, refresh_token: str) -> TokenPair:
        row = await self._accounts.refresh_row(_hash(refresh_token))
        if row is None:
            raise InvalidToken("unknown refresh token")
        if await self._accounts.family_revoked(row.family):
            raise InvalidToken("refresh token revoked")
        if row.expires_at <= time.time():
            raise InvalidToken("refresh token expired; log in again")
        if not await self._accounts.use_refresh(_hash(refresh_token)):
            # Used twice: someone else holds a copy. End the whole login.
            await self._accounts.revoke_family(row.family, time.time())
            raise InvalidToken("refresh token already used; every token of this login is revoked")
        user = await self._accounts.user_by_id(row.user_id)
        if user is None:
            raise InvalidToken("the token's user no longer exists")
        device = await self._accounts.device_of_family(row.family)
        if device is None:
            return await self.issue(user, row.family)
        await self._accounts.device_used(row.family, time.time())
        return await self.issue(user, row.family, (device.machine_id,))

    async def revoke(self, refresh_token: str) -> bool:
        row = await self._accounts.refresh_row(_hash(refresh_token))
        if row is None:
            return False
        await self._accounts.revoke_family(row.family, time.time())
        return True

    async def verify(self, access_token: str) -> Claims:
        """Signature, expiry, issuer, audience, then the revocation rows (SEC-02)."""
        try:
            payload = jwt.decode(
                access_token,
                self._secret,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=ISSUER,
                options={"require": ["sub", "exp", "iat", "jti", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("access token expired; refresh it") from None
        except jwt.InvalidTokenError as error:
            raise InvalidToken(f"invalid access token ({error})") from None
        family = str(payload["jti"]).split(".", 1)[0]
        if await self._accounts.family_revoked(family):
            raise InvalidToken("access token revoked")
        machine_ids = payload.get("machine_ids")
        return Claims(
            str(payload["sub"]),
            str(payload.get("email", "")),
            family,
            tuple(str(m) for m in machine_ids) if isinstance(machine_ids, list) else None,
        )
