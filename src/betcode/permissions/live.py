"""Which sessions the bridge knows, and which requests their claude processes wait on now.

A request is *live* while the claude process that sent it is still the session's process: only
then can its control_response be written to claude. The pid recorded with each request tells
a live request from one whose process has since exited (crash, idle reaping, restart); after a
daemon restart nothing is live.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from betcode.protocol.messages import CanUseTool, ControlRequest
from betcode.sessions.session import Session


@dataclass(frozen=True, slots=True)
class LiveRequest:
    request: ControlRequest
    tool: CanUseTool
    process_pid: int | None


class LiveRequests:
    def __init__(self) -> None:
        # Weak: a deleted session must not be kept alive (or written to) by the bridge.
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._requests: dict[str, dict[str, LiveRequest]] = {}

    def remember(self, session: Session) -> None:
        self._sessions[session.id] = session

    def session(self, session_id: str) -> Session | None:
        """The session, if it is loaded and open (its clients can be told things)."""
        session = self._sessions.get(session_id)
        return None if session is None or session.closed else session

    def add(self, session: Session, request: ControlRequest, tool: CanUseTool) -> None:
        self.remember(session)
        live = LiveRequest(request, tool, session.supervisor.pid)
        self._requests.setdefault(session.id, {})[request.request_id] = live

    def get(self, session_id: str, request_id: str) -> LiveRequest | None:
        return self._requests.get(session_id, {}).get(request_id)

    def pop(self, session_id: str, request_id: str) -> LiveRequest | None:
        requests = self._requests.get(session_id)
        if requests is None:
            return None
        live = requests.pop(request_id, None)
        if not requests:
            del self._requests[session_id]
        return live

    def waiting(self, session: Session, request_id: str) -> bool:
        """Whether the session's current claude process is the one waiting on `request_id`."""
        live = self.get(session.id, request_id)
        return live is not None and _is_current(live, session)

    def waiting_ids(self, session: Session) -> frozenset[str]:
        """The requests the session's current claude process waits on."""
        requests = self._requests.get(session.id, {})
        return frozenset(rid for rid, live in requests.items() if _is_current(live, session))

    def has_pending(self, session_id: str) -> bool:
        """Whether the session's current claude process waits on any answer."""
        session = self._sessions.get(session_id)
        requests = self._requests.get(session_id)
        if session is None or not requests:
            return False
        return any(_is_current(live, session) for live in requests.values())


def _is_current(live: LiveRequest, session: Session) -> bool:
    pid = session.supervisor.pid
    return pid is not None and live.process_pid == pid
