"""Who may use the web client: the owner (the access token, `token`) and signed-in devices.

A device is a browser that exchanged a one-time link for a credential of its own:

1. `betcode web` asks the daemon (as the owner) for a link: a random secret, valid once and for
   `LINK_SECONDS`, printed as `BASE/#link=SECRET` (a fragment: never sent to any server, not
   in a Referer).
2. The page takes it out of the address bar and exchanges it (`POST /api/devices/pair`) for a
   device id and a credential, which it keeps in its own storage (localStorage, IndexedDB for
   the service worker) and sends as `Authorization: Bearer` (WebSocket: the subprotocol
   `bearer.CREDENTIAL`). No cookie: cookies ignore ports, so another server on the same host
   would receive one.
3. Or a short pairing code from `betcode web pair` (shown with a QR code of `BASE/#code=CODE`),
   typed on the page's sign-in screen or opened from the QR code: 8 characters, valid once and
   for `CODE_SECONDS`, kept as a link is. Only `MAX_WRONG_CODES` wrong codes are taken in
   `WRONG_CODE_WINDOW` seconds (daemon-wide, as guesses may come from anywhere); past that every
   code is refused unchecked until the window moves on, so 40 bits cannot be guessed.
4. A used or expired link is refused. Devices are listed and revoked by the owner
   (`betcode web devices`, `betcode web revoke ID`); a revocation closes the device's open
   streams at once, and rotating the access token signs every device out and closes every
   stream (the token file is also watched, for a rotation the daemon was not told of).
5. A phone paired through the relay keeps the relay's device login it paired with
   (`relay_device_id`): its credential is taken only on that login's relayed requests
   (web.access), and revoking it here asks the relay to revoke that login (`relay_revoke`).

Only sha256 hashes of links and credentials are stored (storage.web_devices).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import secrets
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from aiohttp import web

from betcode.remote.short_codes import new_code, normal_code
from betcode.storage import web_devices as rows
from betcode.storage.reader import StoreReader
from betcode.storage.web_devices import WebDevice
from betcode.storage.writer import StoreWriter
from betcode.web.token import TokenFile

log = logging.getLogger(__name__)

LINK_SECONDS = 600.0
CREDENTIAL_BYTES = 32
OWNER = "owner"  # the principal of the access token itself
SIGNED_OUT = 4401  # a private WebSocket close code: revoked, or the access token rotated
TOKEN_WATCH_SECONDS = 0.5
MAX_NAME = 80
CLOSE_WAIT_SECONDS = 1.0
CODE_SECONDS = 300.0
CODE_LENGTH = 8
MAX_WRONG_CODES = 5
WRONG_CODE_WINDOW = 600.0


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def shown_code(code: str) -> str:
    return f"{code[:4]}-{code[4:]}"


def _code_hash(code: str) -> str:
    # Apart from the links' hashes: a code is never a link, nor a link a code.
    return _hash(f"code:{code}")


class TooManyGuesses(Exception):
    """Pairing codes are refused for now: too many wrong ones were tried."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many wrong pairing codes; try again in {retry_after:.0f} s")
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: OWNER, or a device id (`relay_device_id`: the relay's device
    login it was paired with, whose relayed requests alone may use it)."""

    id: str
    name: str
    relay_device_id: str | None = None


RelayRevoke = Callable[[str], Awaitable[bool]]


class Devices:
    def __init__(
        self,
        token: TokenFile,
        writer: StoreWriter,
        reader: StoreReader,
        relay_revoke: RelayRevoke | None = None,
    ) -> None:
        """`relay_revoke`: asks the relay to revoke one of its device logins (this machine's),
        True when it did; None without a relay."""
        self.token = token
        self._relay_revoke = relay_revoke
        self._writer = writer
        self._reader = reader
        self._valid: dict[str, WebDevice] = {}  # credential hash -> device not revoked
        self._sockets: defaultdict[str, set[web.WebSocketResponse]] = defaultdict(set)
        self._fingerprint = token.fingerprint()
        self._closing: set[asyncio.Task[bool]] = set()
        self._wrong_codes: deque[float] = deque()  # monotonic times of the recent wrong codes
        # Devices paired through the relay, revoked ones too, by their relay device login.
        self._relay_logins: dict[str, WebDevice] = {}

    async def load(self) -> None:
        devices = await self._reader.read(rows.list_devices)
        self._valid = {d.credential_hash: d for d in devices if d.revoked_at is None}
        self._relay_logins = {d.relay_device_id: d for d in devices if d.relay_device_id}

    def relay_login_signed_out(self, relay_device_id: str) -> bool:
        """Whether the phone paired with this relay device login was signed out here (revoked,
        or the access token rotated): its relayed calls are refused, whether or not the relay
        was told to revoke the login."""
        device = self._relay_logins.get(relay_device_id)
        return device is not None and not self.current(device)

    def authenticate(self, credential: str) -> Principal | None:
        if not credential:
            return None
        if self.token.matches(credential):
            return Principal(OWNER, "access token")
        device = self._valid.get(_hash(credential))
        if device is None or device.token_fingerprint != self.token.fingerprint():
            return None
        return Principal(device.device_id, device.name, device.relay_device_id)

    def signed_in(self, principal_id: str) -> bool:
        """Whether this device (or the owner) is still signed in: not revoked, made under the
        current access token. What Web Push asks before telling a device anything."""
        if principal_id == OWNER:
            return True
        fingerprint = self.token.fingerprint()
        return any(
            device.device_id == principal_id and device.token_fingerprint == fingerprint
            for device in self._valid.values()
        )

    async def new_link(self) -> tuple[str, float]:
        secret = secrets.token_urlsafe(CREDENTIAL_BYTES)
        expires_at = time.time() + LINK_SECONDS
        fingerprint = self.token.fingerprint()
        await self._writer.call(
            lambda c: rows.insert_link(c, _hash(secret), fingerprint, expires_at)
        )
        return secret, expires_at

    async def new_code(self) -> tuple[str, float]:
        """A pairing code, as shown (`ABCD-EFGH`), and when it expires."""
        code = new_code(CODE_LENGTH)
        expires_at = time.time() + CODE_SECONDS
        fingerprint = self.token.fingerprint()
        await self._writer.call(
            lambda c: rows.insert_link(c, _code_hash(code), fingerprint, expires_at)
        )
        return shown_code(code), expires_at

    async def pair(
        self, link: str, name: str, relay_device_id: str | None = None
    ) -> tuple[WebDevice, str] | None:
        """A new device for a link used once before it expires; None for any other link.
        `relay_device_id`: the relay's device login pairing it (through the gateway)."""
        return await self._redeem(_hash(link), name, relay_device_id)

    async def pair_code(
        self, code: str, name: str, relay_device_id: str | None = None
    ) -> tuple[WebDevice, str] | None:
        """A new device for a pairing code used once before it expires; None for any other
        code. TooManyGuesses, without looking at the code, while the wrong ones are over the
        limit."""
        now = time.monotonic()
        while self._wrong_codes and self._wrong_codes[0] <= now - WRONG_CODE_WINDOW:
            self._wrong_codes.popleft()
        if len(self._wrong_codes) >= MAX_WRONG_CODES:
            raise TooManyGuesses(self._wrong_codes[0] + WRONG_CODE_WINDOW - now)
        paired = await self._redeem(_code_hash(normal_code(code)), name, relay_device_id)
        if paired is None:
            self._wrong_codes.append(now)
            log.warning("web: a wrong pairing code (%d recently)", len(self._wrong_codes))
        return paired

    async def _redeem(
        self, secret_hash: str, name: str, relay_device_id: str | None
    ) -> tuple[WebDevice, str] | None:
        credential = secrets.token_urlsafe(CREDENTIAL_BYTES)
        device = WebDevice(
            device_id=f"dev-{uuid.uuid4().hex[:12]}",
            name=name.strip()[:MAX_NAME] or "browser",
            credential_hash=_hash(credential),
            token_fingerprint=self.token.fingerprint(),
            created_at=time.time(),
            last_seen_at=None,
            revoked_at=None,
            relay_device_id=relay_device_id,
        )
        if not await self._writer.call(lambda c: rows.redeem_link(c, secret_hash, device)):
            return None
        self._valid[device.credential_hash] = device
        if relay_device_id:
            self._relay_logins[relay_device_id] = device
        log.info("web: device %s (%s) signed in", device.device_id, device.name)
        return device, credential

    async def list(self) -> list[WebDevice]:
        return await self._reader.read(rows.list_devices)

    def current(self, device: WebDevice) -> bool:
        return device.revoked_at is None and device.token_fingerprint == self.token.fingerprint()

    async def relay_login_revoked(self, relay_device_id: str) -> None:
        """The relay revoked this device login: the phone paired with it is signed out here
        too, its open streams closed (its credential was refused from then on anyway)."""
        device = self._relay_logins.get(relay_device_id)
        if device is not None and await self.revoke(device.device_id, tell_relay=False):
            log.info("web: device %s signed out: the relay revoked its login", device.device_id)

    async def revoke(self, device_id: str, *, tell_relay: bool = True) -> bool:
        """Signs the device out, and its relay device login too when it paired through the
        relay (the relay told now; its credential is refused anyway, taken only on that login's
        requests)."""
        relay_device_id = next(
            (d.relay_device_id for d in self._valid.values() if d.device_id == device_id), None
        )
        now = time.time()
        revoked = await self._writer.call(lambda c: rows.revoke_device(c, device_id, now))
        self._valid = {h: d for h, d in self._valid.items() if d.device_id != device_id}
        if relay_device_id is not None and revoked:
            self._relay_logins[relay_device_id] = dataclasses.replace(
                self._relay_logins[relay_device_id], revoked_at=now
            )
        await self._close(self._sockets.pop(device_id, set()), "this device was revoked")
        if revoked and relay_device_id is not None and tell_relay:
            await self._revoke_at_relay(device_id, relay_device_id)
        return revoked

    async def _revoke_at_relay(self, device_id: str, relay_device_id: str) -> None:
        try:
            if self._relay_revoke is None:
                raise ConnectionError("this daemon dials no relay now")
            told = await self._relay_revoke(relay_device_id)
        except Exception as error:
            log.warning(
                "web: device %s revoked here, but the relay could not be told to revoke its "
                "device login %s (%s): `betcode auth revoke %s` does",
                device_id,
                relay_device_id,
                error,
                relay_device_id,
            )
            return
        log.info(
            "web: device %s revoked; its relay device login %s %s",
            device_id,
            relay_device_id,
            "too" if told else "was revoked already",
        )

    async def seen(self, principal: Principal) -> None:
        if principal.id != OWNER:
            await self._writer.call(lambda c: rows.mark_seen(c, principal.id, time.time()))

    @contextlib.contextmanager
    def connected(self, principal: Principal, socket: web.WebSocketResponse) -> Iterator[None]:
        """While a stream is open: closed by a revocation of its device or a rotation."""
        self._sockets[principal.id].add(socket)
        try:
            yield
        finally:
            self._sockets[principal.id].discard(socket)

    async def token_changed(self) -> bool:
        """Closes every stream when the access token changed since the last look (a rotation
        signs everyone out); True when it had."""
        fingerprint = self.token.fingerprint()
        if fingerprint == self._fingerprint:
            return False
        self._fingerprint = fingerprint
        everyone = {socket for sockets in self._sockets.values() for socket in sockets}
        self._sockets.clear()
        await self._close(everyone, "the access token was rotated")
        return True

    async def watch_token(self) -> None:
        while True:
            await asyncio.sleep(TOKEN_WATCH_SECONDS)
            try:
                await self.token_changed()
            except Exception:
                log.exception("web: the access token could not be checked")

    async def _close(self, sockets: set[web.WebSocketResponse], why: str) -> None:
        """The close frames leave at once; a peer slow to answer them is not waited for long
        (its close goes on in the background)."""
        if not sockets:
            return
        log.info("web: closing %d stream(s): %s", len(sockets), why)
        closing = {
            asyncio.create_task(socket.close(code=SIGNED_OUT, message=why.encode()))
            for socket in sockets
        }
        self._closing |= closing
        for task in closing:
            task.add_done_callback(self._closing.discard)
        await asyncio.wait(closing, timeout=CLOSE_WAIT_SECONDS)
