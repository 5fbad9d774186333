"""The input lock of one session: exactly one attached client may send input at a time.

Rules (docs/ARCHITECTURE.md#glossary, "input lock"):

* Only an attached client (one with a Converse stream on the session: it can send input) ever
  holds the lock or waits for it. A client is attached while at least one of its streams is;
  the lock is free only while nobody is attached.
* The first client to attach to a session with no holder gets the lock. A viewer (a web page
  showing the session) never gets it by attaching, nor by succession: only by its first input
  while the lock is free, or by ``request``; from then on it is a client like any other.
* When the holder detaches, the lock passes to the first client waiting for it, else to the
  longest-attached client that is not a viewer, else nobody.
* ``request`` by a non-holder gives the holder ``transfer_timeout`` seconds: if the holder sends
  input in that time it keeps the lock (that is its answer, reported at once to a watcher),
  otherwise the lock moves, if the requester is still attached then. A request withdrawn
  before its end (``withdraw``) stops waiting for the lock.
* A holder that sends nothing for ``idle_transfer`` seconds while others wait loses the lock to
  the first waiter.

Time is injected (``clock``) so the rules are tested without sleeping. Once ``watch`` is called
(on the event loop) every change of holder is reported, whatever caused it, and the idle rule
runs on a timer: one ``call_later`` armed only while someone waits, for the moment the holder
would have been idle long enough; holder input does not re-arm it, the timer re-checks when it
fires and sleeps again for the remaining time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass


class NoInputLock(Exception):
    """Input from a client that does not hold the lock."""

    def __init__(self, client_id: str, holder: str | None) -> None:
        super().__init__(self.explain(client_id, holder))
        self.client_id = client_id
        self.holder = holder

    @staticmethod
    def explain(client_id: str, holder: str | None) -> str:
        return (
            f"client {client_id} does not hold the input lock of this session "
            f"(holder: {holder or 'nobody'}); call RequestInputLock to ask for it"
        )


class NotAttached(NoInputLock):
    """Input, or a lock request, from a client without a Converse stream on the session: it
    could not send input with the lock, so it never gets it (the same refusal on the wire)."""

    @staticmethod
    def explain(client_id: str, holder: str | None) -> str:
        return (
            f"client {client_id} is not attached to this session "
            f"(input lock holder: {holder or 'nobody'}); attach to the session with Converse "
            "before sending input or requesting its input lock"
        )


@dataclass(frozen=True, slots=True)
class PendingTransfer:
    """A non-holder asked for the lock; decided at ``deadline``."""

    requester: str
    holder: str
    asked_at: float
    deadline: float


class InputLock:
    def __init__(
        self,
        transfer_timeout: float,
        idle_transfer: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transfer_timeout = transfer_timeout
        self.idle_transfer = idle_transfer
        self._clock = clock
        self.holder: str | None = None
        self._attached: dict[str, int] = {}  # client id -> its open streams, in attach order
        self._viewers: set[str] = set()  # attached, but never handed the lock unasked
        self._waiters: list[str] = []
        self._holder_active_at = 0.0
        self._on_change: Callable[[str | None], None] | None = None
        self._on_holder_input: Callable[[], None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    @property
    def attached(self) -> list[str]:
        return list(self._attached)

    @property
    def waiters(self) -> list[str]:
        return list(self._waiters)

    def attach(self, client_id: str, *, viewer: bool = False) -> bool:
        """Registers one stream of a client; returns True when it holds the lock afterwards.
        A viewer's stream takes nothing (module doc)."""
        if viewer and client_id not in self._attached:
            self._viewers.add(client_id)
        self._attached[client_id] = self._attached.get(client_id, 0) + 1
        if self.holder is None and client_id not in self._viewers:
            self._give(client_id)
        return self.holder == client_id

    def detach(self, client_id: str) -> bool:
        """Forgets one stream of a client, and the client with its last one; returns True
        when the holder changed."""
        streams = self._attached.pop(client_id, 0) - 1
        if streams > 0:
            self._attached[client_id] = streams
            return False
        self._viewers.discard(client_id)
        if client_id in self._waiters:
            self._waiters.remove(client_id)
        if self.holder != client_id:
            return False
        writers = (other for other in self._attached if other not in self._viewers)
        successor = self._waiters[0] if self._waiters else next(writers, None)
        self._give(successor)
        return True

    def check_input(self, client_id: str) -> None:
        """Raises NoInputLock unless ``client_id`` may send input now (NotAttached when it
        is not attached)."""
        if client_id not in self._attached:
            raise NotAttached(client_id, self.holder)
        if self.holder is None and client_id in self._viewers:
            self._give(client_id)  # a viewer's first input takes the free lock
        if self.holder != client_id:
            self._wait_for_lock(client_id)
            raise NoInputLock(client_id, self.holder)
        self._holder_acted()

    def check_attached(self, client_id: str) -> None:
        """Raises NotAttached unless ``client_id`` has a stream on the session (what a viewer
        needs to interrupt a turn)."""
        if client_id not in self._attached:
            raise NotAttached(client_id, self.holder)

    def note_activity(self, client_id: str) -> None:
        if client_id == self.holder:
            self._holder_acted()

    def request(self, client_id: str) -> PendingTransfer | None:
        """Asks for the lock (NotAttached for a client that is not attached). None: granted at
        once. Otherwise decide with ``resolve`` later, or ``withdraw`` the request."""
        if client_id not in self._attached:
            raise NotAttached(client_id, self.holder)
        if self.holder is None or self.holder == client_id:
            self._give(client_id)
            self._holder_acted()  # the holder is there and wants the lock: an answer too
            return None
        self._wait_for_lock(client_id)
        now = self._clock()
        return PendingTransfer(client_id, self.holder, now, now + self.transfer_timeout)

    def resolve(self, transfer: PendingTransfer) -> bool:
        """After the deadline: moves the lock unless the holder answered by sending input or
        the requester is no longer attached (then the holder keeps it)."""
        if self.holder == transfer.requester:
            return True
        if transfer.requester not in self._attached:
            return False
        if self.holder != transfer.holder or self._holder_active_at > transfer.asked_at:
            return False
        self._give(transfer.requester)
        return True

    def withdraw(self, client_id: str) -> None:
        """The client no longer asks for the lock (its request was cancelled): it stops
        waiting, so the idle rule does not hand it the lock later."""
        if client_id in self._waiters:
            self._waiters.remove(client_id)

    def idle_handover(self) -> bool:
        """Moves the lock from an idle holder to the first waiter; True when it moved."""
        if self.holder is None or not self._waiters:
            return False
        if self._clock() - self._holder_active_at < self.idle_transfer:
            return False
        self._give(self._waiters[0])
        return True

    def watch(
        self,
        on_change: Callable[[str | None], None],
        on_holder_input: Callable[[], None] | None = None,
    ) -> None:
        """From now on calls ``on_change(new_holder)`` each time the holder changes (attach,
        detach, request, idle handover, a free lock taken by input) and ``on_holder_input()``
        each time the holder sends input (its answer to a request), and applies the idle rule
        by itself (needs the running event loop)."""
        self._on_change = on_change
        self._on_holder_input = on_holder_input
        self._arm_idle_timer()

    def retime(self, transfer_timeout: float, idle_transfer: float) -> None:
        """New timings (a settings reload); a transfer already asked for keeps its deadline."""
        self.transfer_timeout = transfer_timeout
        self.idle_transfer = idle_transfer
        self._cancel_idle_timer()
        self._arm_idle_timer()

    def close(self) -> None:
        """Stops the idle timer and the reports for good (the session is gone)."""
        self._on_change = None
        self._on_holder_input = None
        self._cancel_idle_timer()

    @property
    def idle_timer_armed(self) -> bool:
        return self._idle_timer is not None

    def _arm_idle_timer(self) -> None:
        if self._on_change is None or self._idle_timer is not None:
            return
        if self.holder is None or not self._waiters:
            return
        delay = max(0.0, self._holder_active_at + self.idle_transfer - self._clock())
        self._idle_timer = asyncio.get_running_loop().call_later(delay, self._idle_timer_fired)

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _idle_timer_fired(self) -> None:
        self._idle_timer = None
        # Not moved: the holder was active meanwhile (sleep for the rest), or nobody waits.
        self.idle_handover()
        self._arm_idle_timer()

    def _holder_acted(self) -> None:
        self._holder_active_at = self._clock()
        if self._on_holder_input is not None:
            self._on_holder_input()

    def _wait_for_lock(self, client_id: str) -> None:
        if client_id not in self._waiters:
            self._waiters.append(client_id)
        self._arm_idle_timer()

    def _give(self, client_id: str | None) -> None:
        changed = client_id != self.holder
        self.holder = client_id
        self._viewers.discard(client_id or "")  # it holds the lock: a writer from now on
        if client_id is not None and client_id in self._waiters:
            self._waiters.remove(client_id)
        self._holder_active_at = self._clock()
        # A new holder gets a fresh idle period: the armed timer fires early and sleeps again.
        self._arm_idle_timer()
        if changed and self._on_change is not None:
            self._on_change(client_id)
