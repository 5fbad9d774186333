"""What on this daemon needs a human (TOP-06), for the relay's attention notifications and the
web client's Web Push (betcode.push).

A turn that finished, or ended in an error, is noted as it ends, unless a client holds the
session's input lock then (someone is watching: no push needed). Waiting permission requests
and questions are read from the permission bridge by the tunnel and by the push notifier;
`WaitingNotices` picks the ones to announce, asking `lock_held` the same question. What
leaves here is a kind, the session id, a notification id and the session's title (its name,
else its directory's name): never conversation content."""

from __future__ import annotations

import collections
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol, TypeVar

from betcode.sessions.input_lock import InputLock
from betcode.sessions.turns import TurnEnd
from betcode.storage.sessions import SessionRecord

TURN_FINISHED = "turn_finished"
ERROR = "error"
KEPT_UNSENT = 100  # turn ends kept while no tunnel takes them; older ones are dropped


class AttentionSession(Protocol):
    """What of a session the log reads (sessions.session.Session is one)."""

    id: str
    lock: InputLock
    record: SessionRecord
    turn_listeners: list[Callable[[TurnEnd], None]]


@dataclass(frozen=True)
class Attention:
    kind: str
    session_id: str
    notification_id: str
    title: str


class AttentionLog:
    def __init__(self, on_noted: Callable[[], None] | None = None) -> None:
        """`on_noted` is called once a turn end is noted (a reader that waits wakes on it)."""
        self._on_noted = on_noted
        self._sessions: weakref.WeakValueDictionary[str, AttentionSession] = (
            weakref.WeakValueDictionary()
        )
        self._unsent: collections.deque[Attention] = collections.deque(maxlen=KEPT_UNSENT)
        # Ids stay unique across daemon restarts (the relay drops an id it has seen).
        self._boot = uuid.uuid4().hex[:12]
        self._count = 0

    def watch(self, session: AttentionSession) -> None:
        """Called for every session that comes alive (SessionManager.on_register)."""
        self._sessions[session.id] = session
        session.turn_listeners.append(lambda end: self._turn_ended(session, end))

    def lock_held(self, session_id: str) -> bool:
        session = self._sessions.get(session_id)
        return session is not None and session.lock.holder is not None

    def title(self, session_id: str) -> str:
        session = self._sessions.get(session_id)
        if session is None:
            return ""
        return session.record.name or PurePath(session.record.working_directory).name

    def take(self) -> list[Attention]:
        """The turn ends noted since the last call."""
        taken = list(self._unsent)
        self._unsent.clear()
        return taken

    def _turn_ended(self, session: AttentionSession, end: TurnEnd) -> None:
        if session.lock.holder is not None:
            return
        self._count += 1
        kind = TURN_FINISHED if end.ok else ERROR
        notification_id = f"{kind}:{self._boot}:{self._count}"
        self._unsent.append(Attention(kind, session.id, notification_id, self.title(session.id)))
        if self._on_noted is not None:
            self._on_noted()


class WaitingRequest(Protocol):
    """What of a pending request is looked at (storage.pending.PendingPermission is one)."""

    @property
    def request_id(self) -> str: ...

    @property
    def session_id(self) -> str: ...


W = TypeVar("W", bound=WaitingRequest)


class WaitingNotices:
    """Which waiting requests to announce: each once while it waits, and none of a session
    whose input lock a client holds (someone is at it); one skipped so is announced at the
    first look after the lock is free, if it still waits."""

    def __init__(self, attention: AttentionLog | None) -> None:
        self._attention = attention
        self._announced: set[str] = set()

    def new(self, waiting: Iterable[W]) -> list[W]:
        """Of all the requests waiting now, those to announce now (remembered as announced)."""
        rows = list(waiting)
        self._announced &= {row.request_id for row in rows}
        fresh = []
        for row in rows:
            if row.request_id in self._announced:
                continue
            if self._attention is not None and self._attention.lock_held(row.session_id):
                continue
            self._announced.add(row.request_id)
            fresh.append(row)
        return fresh
