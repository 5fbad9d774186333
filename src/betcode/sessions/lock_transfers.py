"""The input lock as a session's clients see it: every move of the holder, and every
RequestInputLock that waits for the holder's answer, becomes an event in the session's log
(persisted and replayed like any other), so the holder's terminal can say that someone asks
for the lock and the requester's that it waits.

A wait is announced when it starts (InputLockRequested PENDING, with its deadline) and settled
once: by the InputLockChange of the lock moving (to the requester or anyone else), or, when
the holder answered by sending input, by InputLockRequested KEPT at the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from betcode.sessions import translate
from betcode.sessions.input_lock import InputLock
from betcode.storage import clients as client_rows


class LockTransfers:
    def __init__(
        self,
        session_id: str,
        lock: InputLock,
        emit: Callable[[Sequence[translate.AgentEvent]], object],
        background_write: Callable[[Callable[[Any], object]], None],
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._session_id = session_id
        self._lock = lock
        self._emit = emit
        self._background_write = background_write
        self._wall_clock = wall_clock
        lock.watch(self._moved)

    async def request(self, client_id: str) -> bool:
        """RequestInputLock: granted at once if nobody else holds the lock; otherwise the
        holder has the transfer timeout to answer by sending input."""
        transfer = self._lock.request(client_id)
        if transfer is None:
            return True
        deadline = self._wall_clock() + (transfer.deadline - transfer.asked_at)
        announce = partial(
            translate.input_lock_requested_event, transfer.requester, transfer.holder, deadline
        )
        self._emit([announce()])
        await asyncio.sleep(max(0.0, transfer.deadline - time.monotonic()))
        granted = self._lock.resolve(transfer)
        if not granted and self._lock.holder == transfer.holder:
            self._emit([announce(kept=True)])
        return granted

    def _moved(self, holder: str | None) -> None:
        """Every change of holder: shown to the clients, and mirrored in SQLite
        (sessions.input_lock_client, connected_clients.has_input_lock) through the writer."""
        self._emit([translate.input_lock_event(holder or "")])
        session_id = self._session_id
        self._background_write(lambda c: client_rows.record_input_lock(c, session_id, holder))
