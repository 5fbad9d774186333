"""Parts for session tests on a real database and store writer: a stand-in for the permission
bridge (imported by name; this folder is on sys.path). The `world` fixture is in conftest.py."""

from __future__ import annotations

from betcode.protocol.messages import ControlRequest
from betcode.sessions import translate
from betcode.sessions.fanout import Frame
from betcode.sessions.session import Session
from betcode.v1 import common_pb2


class RecordingGate:
    """Stands in for the permission bridge: answers a request by emitting an event of its own."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.emitted: list[Frame] = []

    async def on_control_request(self, session: Session, request: ControlRequest) -> None:
        self.requests.append(request.request_id)
        status = translate.status_event(common_pb2.AgentStatus.AGENT_STATUS_WAITING_FOR_USER)
        self.emitted.extend(session.emit([status]))

    async def on_cancel(self, session: Session, request_id: str) -> None:
        raise AssertionError("no cancel in these tests")

    async def on_session_activity(self, session: Session) -> None:
        return None

    async def replay_frames(self, session: Session, last_seq: int) -> list[Frame]:
        return []

    def has_pending(self, session_id: str) -> bool:
        return False
