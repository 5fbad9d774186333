"""Pairing a phone through the relay (docs/RELAY.md "Pairing a phone through the relay").

A machine asks for a ticket (MachineService.CreatePairingTicket, proving its certificate as
for the tunnel): `TICKET_LENGTH` characters of Crockford's base32 (50 bits), valid once and for
`TICKET_SECONDS`, kept only as a hash with the machine and its owner. A browser that presents
it (AuthService.PairDevice, through the web front's `POST /relay/api/pair`) becomes a device
login of the owner: a token family of its own whose tokens reach only that machine, listed
(name, created, last used) and revocable; revoking it revokes the family, so its access token
and its refresh token stop at once.

Wrong tickets are counted, each of them, per browser address (`MAX_WRONG_PER_ADDRESS`) and over
the whole relay instance (`MAX_WRONG_PER_RELAY`: guesses spread over many addresses) in a
sliding `WRONG_WINDOW_SECONDS`; past either, tickets from there are refused without being looked
at until the window moves on."""

from __future__ import annotations

import collections
import hashlib
import time
import uuid
from collections.abc import Callable

from betcode.relay.accounts import Accounts, DeviceLogin, Machine
from betcode.relay.tokens import TokenIssuer, TokenPair
from betcode.remote.short_codes import new_code, normal_code

TICKET_LENGTH = 10
TICKET_SECONDS = 300
MAX_WRONG_PER_ADDRESS = 5
MAX_WRONG_PER_RELAY = 100
WRONG_WINDOW_SECONDS = 600.0
MAX_DEVICE_NAME = 80
RELAY_WIDE = "*"


class TicketRefused(Exception):
    """Unknown, used or expired."""


class TooManyWrongTickets(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many wrong pairing tickets; try again in {retry_after:.0f} s")
        self.retry_after = retry_after


def ticket_hash(ticket: str) -> str:
    return hashlib.sha256(f"pairing-ticket:{normal_code(ticket)}".encode()).hexdigest()


class WrongGuesses:
    """The recent wrong tickets, per address and relay-wide (in memory: each relay instance
    counts its own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._wrong: dict[str, collections.deque[float]] = collections.defaultdict(
            collections.deque
        )

    def _recent(self, key: str) -> collections.deque[float]:
        times = self._wrong.get(key, collections.deque())
        while times and times[0] <= self._clock() - WRONG_WINDOW_SECONDS:
            times.popleft()
        if not times:
            self._wrong.pop(key, None)  # an address not seen for a while is not kept
        return times

    def check(self, address: str) -> None:
        """TooManyWrongTickets while the address, or the relay, is over its limit."""
        for key, limit in ((address, MAX_WRONG_PER_ADDRESS), (RELAY_WIDE, MAX_WRONG_PER_RELAY)):
            times = self._recent(key)
            if len(times) >= limit:
                raise TooManyWrongTickets(times[0] + WRONG_WINDOW_SECONDS - self._clock())

    def tracked(self) -> int:
        """How many keys (addresses and the relay's) hold recent wrong tickets."""
        return len(self._wrong)

    def wrong(self, address: str) -> None:
        now = self._clock()
        self._wrong[address].append(now)
        self._wrong[RELAY_WIDE].append(now)


async def new_ticket(accounts: Accounts, machine: Machine) -> str:
    ticket = new_code(TICKET_LENGTH)
    now = time.time()
    await accounts.add_pairing_ticket(ticket_hash(ticket), machine, now, now + TICKET_SECONDS)
    return ticket


class Pairing:
    """Tickets redeemed as device logins, with the wrong ones counted."""

    def __init__(self, accounts: Accounts, issuer: TokenIssuer) -> None:
        self._accounts = accounts
        self._issuer = issuer
        self._guesses = WrongGuesses()

    async def pair(self, ticket: str, name: str, address: str) -> tuple[DeviceLogin, TokenPair]:
        """The ticket's one use: a new device login and its first tokens. TooManyWrongTickets
        (the ticket unread) or TicketRefused."""
        self._guesses.check(address)
        now = time.time()
        used = await self._accounts.use_pairing_ticket(ticket_hash(ticket), now)
        owner = None if used is None else await self._accounts.user_by_id(used[1])
        if used is None or owner is None:
            self._guesses.wrong(address)
            raise TicketRefused
        family = uuid.uuid4().hex
        device = DeviceLogin(
            uuid.uuid4().hex[:12],
            owner.id,
            used[0],
            name.strip()[:MAX_DEVICE_NAME] or "a browser",
            family,
            now,
            now,
            None,
        )
        await self._accounts.add_device(device)
        return device, await self._issuer.issue(owner, family, (device.machine_id,))
