"""Stand-ins for what the attention notifications read (sessions.attention): a live session's
parts (its input lock the real one) and a stored waiting request."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from betcode.sessions.input_lock import InputLock
from betcode.sessions.turns import TurnEnd
from betcode.storage.pending import PendingPermission
from betcode.storage.sessions import SessionRecord


@dataclass
class Watched:
    """The parts of a live session the AttentionLog reads; its input lock is the real one."""

    id: str
    record: SessionRecord
    lock: InputLock = field(default_factory=lambda: InputLock(30.0, 300.0))
    turn_listeners: list[Callable[[TurnEnd], None]] = field(default_factory=list)

    def end_turn(self, ok: bool) -> None:
        for listener in self.turn_listeners:
            listener(TurnEnd(ok, "SECRET conversation text", 0 if ok else 1))


def watched(session_id: str, directory: str) -> Watched:
    record = SessionRecord(
        session_id, None, None, "idle", "m", directory, None, 0.0, 0.0, 0, 0, 0.0, None, 0, "", 0
    )
    return Watched(session_id, record)


def waiting_row(
    request_id: str, session_id: str, tool_input: dict[str, Any], tool: str = "Bash"
) -> PendingPermission:
    """A request as `pending_permissions` holds it while it waits."""
    return PendingPermission(
        request_id=request_id,
        session_id=session_id,
        tool_name=tool,
        tool_description="Clean the build",
        input=json.dumps(tool_input),
        tool_use_id=None,
        dialect="stream_json",
        is_question=False,
        received_at=0.0,
        forwarded_at=0.0,
        expires_at=1e12,
        last_extended_at=None,
        extension_count=0,
        reminder_1h_sent=False,
        reminder_24h_sent=False,
        push_notification_id=None,
        response_received=False,
        response_decision=None,
        response_payload=None,
        response_at=None,
        delivered=False,
    )


class WaitingRequests:
    """The permission bridge's side the push notifier reads (push.notifications.Requests): what
    waits now (`pending`), and what became of those answered (`answered`)."""

    def __init__(self) -> None:
        self.pending: list[PendingPermission] = []
        self.forwarded_listeners: list[Callable[[str], None]] = []
        self.answered: dict[str, PendingPermission] = {}

    async def list_pending(self, session_id: str | None) -> list[PendingPermission]:
        return list(self.pending)

    async def find_request(self, request_id: str) -> PendingPermission | None:
        return self.answered.get(request_id)
