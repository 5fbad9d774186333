"""What on this daemon needs a human (TOP-06), for the relay's attention notifications.

A turn that finished, or ended in an error, is noted as it ends, unless a client holds the
session's input lock then (someone is watching: no push needed). Waiting permission requests
and questions are read from the permission bridge by the tunnel, which asks `lock_held` the
same question. What leaves here is a kind, the session id, a notification id and the
session's title (its name, else its directory's name): never conversation content."""

from __future__ import annotations

import collections
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

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
    def __init__(self) -> None:
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
