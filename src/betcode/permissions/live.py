"""Which sessions the bridge knows, and which requests their claude processes wait on now.

A request is *live* while the claude process that sent it is still the session's process: only
then can its control_response be written to claude. The pid recorded with each request tells
a live request from one whose process has since exited (crash, idle reaping, restart); after a
daemon restart nothing is live.
"""

from __future__ import annotations

import weakref

from betcode.sessions.session import Session


class LiveRequests:
    def __init__(self) -> None:
        # Weak: a deleted session must not be kept alive (or written to) by the bridge.
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        # session id → request id → pid of the claude process that asked
        self._requests: dict[str, dict[str, int | None]] = {}

    def remember(self, session: Session) -> None:
        self._sessions[session.id] = session

    def session(self, session_id: str) -> Session | None:
        """The session, if it is loaded and open (its clients can be told things)."""
        session = self._sessions.get(session_id)
        return None if session is None or session.closed else session

    def add(self, session: Session, request_id: str) -> None:
        """The session's current claude process waits on `request_id`."""
        self.remember(session)
        self._requests.setdefault(session.id, {})[request_id] = session.supervisor.pid

    def pop(self, session_id: str, request_id: str) -> bool:
        """Forget `request_id`; whether it was known."""
        requests = self._requests.get(session_id)
        if requests is None or request_id not in requests:
            return False
        del requests[request_id]
        if not requests:
            del self._requests[session_id]
        return True

    def asker(self, session: Session, request_id: str) -> int | None:
        """The pid of the claude process waiting on `request_id`, if it is the session's
        current process (its answer is written to that process only); else None."""
        requests = self._requests.get(session.id, {})
        pid = requests.get(request_id)
        return pid if request_id in requests and _is_current(pid, session) else None

    def waiting_ids(self, session: Session) -> frozenset[str]:
        """The requests the session's current claude process waits on."""
        requests = self._requests.get(session.id, {})
        return frozenset(rid for rid, pid in requests.items() if _is_current(pid, session))

    def has_pending(self, session_id: str) -> bool:
        """Whether the session's current claude process waits on any answer."""
        session = self._sessions.get(session_id)
        requests = self._requests.get(session_id)
        if session is None or not requests:
            return False
        return any(_is_current(pid, session) for pid in requests.values())


def _is_current(asker_pid: int | None, session: Session) -> bool:
    pid = session.supervisor.pid
    return pid is not None and asker_pid == pid
