"""The input lock as a session's clients see it: every move of the holder, and every
RequestInputLock that waits for the holder's answer, becomes an event in the session's log
(persisted and replayed like any other), so the holder's terminal can say that someone asks
for the lock and the requester's that it waits.

A wait is announced when it starts (InputLockRequested PENDING, with its deadline) and settled
once: by the InputLockChange of the lock moving at the deadline (to the requester, or earlier
to anyone else), or, as soon as the holder answers by sending input, by InputLockRequested
KEPT (the RequestInputLock call returns then, not granted). The lock only goes to an attached
client: a requester whose Converse stream is gone at the deadline (and not back) is not
granted, KEPT; one whose call is cancelled before either end (it disconnected, or gave up)
withdraws its request, KEPT at once. A wait the daemon's stop cut off is settled at the next
start (storage.reconcile).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from betcode.sessions import translate
from betcode.sessions.input_lock import InputLock, PendingTransfer
from betcode.storage import clients as client_rows


class LockTransfers:
    def __init__(
        self,
        session_id: str,
        *,
        lock: InputLock,
        emit: Callable[[Sequence[translate.AgentEvent]], object],
        background_write: Callable[[Callable[[Any], object]], None],
    ) -> None:
        self._session_id = session_id
        self._lock = lock
        self._emit = emit
        self._background_write = background_write
        self._answers: list[tuple[PendingTransfer, asyncio.Event]] = []  # waits in progress
        lock.watch(self._moved, self._holder_sent_input)

    async def request(self, client_id: str) -> bool:
        """RequestInputLock: granted at once if nobody else holds the lock; otherwise the
        holder has the transfer timeout to answer by sending input. NotAttached for a client
        without a Converse stream on the session."""
        transfer = self._lock.request(client_id)
        if transfer is None:
            return True
        deadline = time.time() + (transfer.deadline - transfer.asked_at)
        announce = partial(
            translate.input_lock_requested_event, transfer.requester, transfer.holder, deadline
        )
        self._emit([announce()])
        answered = asyncio.Event()
        wait = (transfer, answered)
        self._answers.append(wait)
        try:
            timeout = max(0.0, transfer.deadline - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(answered.wait(), timeout)
            granted = self._lock.resolve(transfer)
        except asyncio.CancelledError:
            self._lock.withdraw(client_id)
            raise
        finally:
            self._answers.remove(wait)
            # Not granted, and the lock did not move (a move settled the wait): the holder kept
            # it, by answering or because the requester went away first (cancelled).
            if self._lock.holder == transfer.holder:
                self._emit([announce(kept=True)])
        return granted

    def _holder_sent_input(self) -> None:
        """The holder's input answers every request waiting for it: they end now, not at
        their deadline."""
        for transfer, answered in self._answers:
            if transfer.holder == self._lock.holder:
                answered.set()

    def _moved(self, holder: str | None) -> None:
        """Every change of holder: shown to the clients, and mirrored in SQLite
        (sessions.input_lock_client, connected_clients.has_input_lock) through the writer."""
        self._emit([translate.input_lock_event(holder or "")])
        for _, answered in self._answers:  # the move settles every wait (see `request`)
            answered.set()
        session_id = self._session_id
        self._background_write(lambda c: client_rows.record_input_lock(c, session_id, holder))
