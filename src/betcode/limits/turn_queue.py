"""At most `daemon.limits.max_running_turns` client turns at once; the others wait, in order.

A message that may not start now waits in one queue for the whole daemon. Each session whose
messages wait is shown where the first of them stands ("queued: 2 of 3 waiting"), as a status
event (AGENT_STATUS_QUEUED) stored in its log like any other, again whenever that changes. When
a turn ends, the first waiting message whose session has no turn running starts: a session's
own later message waits behind its earlier one, and a session runs one queued turn at a time.
A cancel takes the session's waiting messages out of the queue (and says so).

The client's request returns once its message is queued: the stream goes on (a cancel must
get through), and the message starts from here when its turn comes. A queued message is stored
(`QueueStore`) before the request returns, and taken out as its turn starts (in the transaction
that records its line, or its cost request) or it is cancelled: a restarted daemon queues again,
in order, the messages it had not started (`restore`), and none it had.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from betcode.sessions import translate
from betcode.sessions.session import Session
from betcode.sessions.turns import TurnEnd
from betcode.v1 import common_pb2

log = logging.getLogger(__name__)

Status = common_pb2.AgentStatus
# Starts the message's turn, taking it out of the store if it was queued (its row id); False
# when it did not start one (the message is held).
# (session, client id, text, queued row id, idempotency key): records the message with its key.
StartTurn = Callable[[Session, str | None, str, int | None, str], Awaitable[bool]]


class QueueStore(Protocol):
    async def add(self, session_id: str, text: str, idempotency_key: str) -> int:
        """Store a queued message last (with its idempotency key, if any); its row id."""

    def remove(self, row_ids: list[int]) -> None:
        """Forget these queued messages (ordered on the store writer, not waited for)."""


@dataclass(eq=False, slots=True)
class _Place:
    """A running turn's place: its session, and who took it (identity tells two apart)."""

    session: Session


@dataclass(eq=False, slots=True)
class _Waiting:
    session: Session
    text: str  # sent as no client's: the client's input lock was checked when it was queued
    row_id: int  # in the store


class TurnQueue:
    def __init__(self, max_running: int, start_turn: StartTurn, store: QueueStore) -> None:
        self.max_running = max_running  # 0: no cap
        self._start_turn = start_turn
        self._store = store
        self._waiting: deque[_Waiting] = deque()
        # Session id → the token of its queued-and-started turn still running.
        self._running: dict[str, _Place] = {}
        self._listening: weakref.WeakSet[Session] = weakref.WeakSet()
        self._shown: dict[str, str] = {}  # session id → the queue status it was last shown
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False  # the daemon stops: nothing starts, what waits stays stored

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def places(self) -> dict[str, tuple[int, int]]:
        """Session id → where its first waiting message stands: (position, how many wait)."""
        total = len(self._waiting)
        found: dict[str, tuple[int, int]] = {}
        for position, entry in enumerate(self._waiting, start=1):
            found.setdefault(entry.session.id, (position, total))
        return found

    def close(self) -> None:
        """The daemon stops: the turns its shutdown ends start nothing queued; the messages
        still waiting stay stored for the next daemon."""
        self._closed = True

    def apply(self, max_running: int) -> None:
        """A reload: a larger cap (or none) starts waiting messages at once."""
        self.max_running = max_running
        self._pump()

    async def submit(
        self, session: Session, client_id: str | None, text: str, idempotency_key: str = ""
    ) -> None:
        """Start the message's turn now if a place is free, else queue it. Its idempotency key
        is recorded with whatever the message becomes first: its line or its queued row."""
        if not self.max_running and not self._waiting:
            await self._start_turn(session, client_id, text, None, idempotency_key)
            return
        self._listen(session)
        if not self._waiting and self._may_start(session):
            token = self._take_place(session)
            await self._run(session, client_id, text, token, idempotency_key=idempotency_key)
            return
        row_id = await self._store.add(session.id, text, idempotency_key)
        self._waiting.append(_Waiting(session, text, row_id))
        log.info("session %s: a message is queued (%d waiting)", session.id, len(self._waiting))
        self._show_positions()
        self._pump()

    def restore(self, queued: list[tuple[int, Session, str]]) -> None:
        """After a restart: (row id, session, text) of the messages stored as queued, in
        order, wait again."""
        for row_id, session, text in queued:
            self._listen(session)
            self._waiting.append(_Waiting(session, text, row_id))
        if queued:
            log.info("%d queued message(s) wait again after the restart", len(queued))
            self._show_positions()
            self._pump()

    def cancel(self, session: Session) -> int:
        """Take the session's waiting messages out of the queue; how many."""
        kept = deque(entry for entry in self._waiting if entry.session is not session)
        dropped = len(self._waiting) - len(kept)
        if dropped:
            self._store.remove([e.row_id for e in self._waiting if e.session is session])
            self._waiting = kept
            self._shown.pop(session.id, None)
            message = f"cancelled: {dropped} queued message(s) not sent"
            session.emit([translate.status_event(Status.AGENT_STATUS_IDLE, message)])
            self._show_positions()
        return dropped

    def _may_start(self, session: Session) -> bool:
        free = not self.max_running or len(self._running) < self.max_running
        return free and session.id not in self._running

    def _pump(self) -> None:
        """Start every waiting message that may start now, first come first. A closed
        (deleted, shut down) session's place is free and its messages are dropped."""
        if self._closed:
            return
        for session_id, place in list(self._running.items()):
            if place.session.closed:
                del self._running[session_id]
        gone = [entry for entry in self._waiting if entry.session.closed]
        if gone:
            self._waiting = deque(entry for entry in self._waiting if not entry.session.closed)
            self._store.remove([entry.row_id for entry in gone])
        started = False
        for entry in list(self._waiting):
            if not self._may_start(entry.session):
                continue
            self._waiting.remove(entry)
            self._shown.pop(entry.session.id, None)
            started = True
            # Its place is taken now, not once the task runs: the loop goes on deciding.
            token = self._take_place(entry.session)
            task = asyncio.create_task(
                self._start_queued(entry, token), name=f"queued-turn-{entry.session.id}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if started:
            self._show_positions()

    def _take_place(self, session: Session) -> _Place:
        place = self._running[session.id] = _Place(session)
        return place

    async def _run(
        self,
        session: Session,
        client_id: str | None,
        text: str,
        token: _Place,
        queued_id: int | None = None,
        idempotency_key: str = "",
    ) -> None:
        # Not started (held at a cost cap, or failed: its turn ended visibly, or the client is
        # told): the place is free. A client that goes away meanwhile (cancelled) changes
        # nothing: its message, once recorded, is delivered all the same, and its turn's end
        # frees the place.
        try:
            started = await self._start_turn(session, client_id, text, queued_id, idempotency_key)
        except Exception:
            if queued_id is not None:
                self._store.remove([queued_id])  # failed visibly: not to be sent again
            self._free(session, token)
            raise
        if not started:
            self._free(session, token)

    def _free(self, session: Session, token: _Place) -> None:
        if self._running.get(session.id) is token:
            del self._running[session.id]
            self._pump()

    async def _start_queued(self, entry: _Waiting, token: _Place) -> None:
        try:
            await self._run(entry.session, None, entry.text, token, entry.row_id)
        except Exception:
            log.exception("session %s: a queued message did not start", entry.session.id)

    def _listen(self, session: Session) -> None:
        if session not in self._listening:
            self._listening.add(session)
            session.turn_listeners.append(lambda end: self._turn_ended(session, end))

    def _turn_ended(self, session: Session, _end: TurnEnd) -> None:
        if self._running.pop(session.id, None) is not None:
            self._pump()

    def _show_positions(self) -> None:
        """Each session with waiting messages is shown where its first one stands, once per
        change."""
        sessions = {entry.session.id: entry.session for entry in self._waiting}
        for session_id, (position, total) in self.places().items():
            text = f"queued: {position} of {total} waiting for a turn slot"
            if self._shown.get(session_id) != text:
                self._shown[session_id] = text
                sessions[session_id].emit(
                    [translate.status_event(Status.AGENT_STATUS_QUEUED, text)]
                )
