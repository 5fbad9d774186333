"""The requests the clients answer (bridge.py's steps 3 and 6): stored, then shown.

A forwarded request is stored in `pending_permissions` BEFORE any client sees it, then shown
to every client of the session; an unanswered request for the same call whose process is gone
(claude asks again after a restart) is withdrawn in the same transaction, so the user never
answers one question twice. A client that catches up is shown every still-pending request
again (flagged is_replay); after a daemon restart, the requests the still-running claude made
wait on it again.
"""

from __future__ import annotations

import json
import logging
import sqlite3

import msgspec

from betcode.config.settings import PermissionSettings
from betcode.permissions import orphans
from betcode.permissions.cost_requests import COST_LIMIT_TOOL
from betcode.permissions.live import LiveRequests
from betcode.permissions.sweeper import Clock
from betcode.permissions.withdrawals import settle_cancelled
from betcode.protocol.messages import CanUseTool, ControlRequest
from betcode.sessions import translate
from betcode.sessions.fanout import Frame
from betcode.sessions.session import Session
from betcode.storage import pending as pending_rows
from betcode.storage.pending import PendingPermission
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.v1 import agent_pb2, common_pb2

log = logging.getLogger(__name__)

ASK_USER_QUESTION = "AskUserQuestion"


class Forwarding:
    """Forwards requests for the bridge; shares its live requests and clock."""

    def __init__(
        self,
        writer: StoreWriter,
        reader: StoreReader,
        live: LiveRequests,
        settings: PermissionSettings,
        clock: Clock,
    ) -> None:
        self._writer = writer
        self._reader = reader
        self._live = live
        self._settings = settings
        self._clock = clock

    def apply_settings(self, settings: PermissionSettings) -> None:
        """A reload: requests forwarded from now on get the new TTL."""
        self._settings = settings

    async def forward(
        self, session: Session, request: ControlRequest, tool: CanUseTool, asker: str | None
    ) -> None:
        """Store the request, then show it; `asker` names the subagent that asks, if one does."""
        if asker is not None:
            said = tool.description or tool.decision_reason
            asks = f"{asker} asks" + (f": {said}" if said else "")
            tool = msgspec.structs.replace(tool, description=asks)
        now = self._clock()
        expires_at = now + self._settings.ttl_seconds
        is_question = tool.tool_name == ASK_USER_QUESTION
        waiting = self._live.waiting_ids(session)

        def store(conn: sqlite3.Connection) -> list[str]:
            superseded = _supersede(conn, session.id, tool, waiting, now)
            pending_rows.insert_pending(
                conn,
                request_id=request.request_id,
                session_id=session.id,
                tool_name=tool.tool_name,
                input_json=json.dumps(tool.input),
                dialect=str(request.dialect),
                received_at=now,
                expires_at=expires_at,
                tool_description=tool.description or tool.decision_reason,
                tool_use_id=tool.tool_use_id,
                is_question=is_question,
                permission_suggestions=json.dumps(tool.permission_suggestions),
            )
            return superseded

        superseded = await self._writer.call(store)
        self._live.add(session, request.request_id)
        again = f"asked again as {request.request_id}"
        events = [
            translate.permission_resolved_event(old, "cancelled", message=again)
            for old in superseded
        ]
        parent = session.translator.parent_tool_use_id_of(tool.tool_use_id)
        events.append(
            translate.user_question_event(request.request_id, tool, parent_tool_use_id=parent)
            if is_question
            else translate.permission_request_event(
                request.request_id, tool, expires_at=int(expires_at), parent_tool_use_id=parent
            )
        )
        events.append(translate.status_event(common_pb2.AgentStatus.AGENT_STATUS_WAITING_FOR_USER))
        session.emit(events)
        session.background_write(lambda c: pending_rows.mark_forwarded(c, request.request_id, now))

    async def reattached(self, session: Session, claude_started_at: float) -> None:
        """After a daemon restart the session's claude still runs (under its holder): the
        requests it made, unanswered, wait on it again, so an answer goes to the process that
        asked (no resume note). Those made before it started are a gone process's (orphans)."""
        rows = await self._reader.read(lambda c: pending_rows.list_unanswered(c, session.id))
        for row in rows:
            if row.received_at < claude_started_at or row.tool_name == COST_LIMIT_TOOL:
                continue  # a gone process's, or no process's (a cost request)
            self._live.add(session, row.request_id)
            log.info("session %s: %s waits on the same claude again", session.id, row.request_id)

    async def replay_frames(self, session_ids: list[str], last_seq: int) -> list[Frame]:
        """Every still-pending request of these sessions, flagged is_replay."""
        rows = await self._reader.read(
            lambda c: [row for s in session_ids for row in pending_rows.list_unanswered(c, s)]
        )
        frames: list[Frame] = []
        for row in rows:
            event = _event_for_row(row, is_replay=True)
            # A replayed request reuses the latest seq the client has seen: it is a reminder of
            # state, not a new event, and clients handle it idempotently by request id.
            event.sequence = last_seq
            frames.append((last_seq, event.SerializeToString()))
        return frames


def _supersede(
    conn: sqlite3.Connection,
    session_id: str,
    tool: CanUseTool,
    waiting: frozenset[str],
    now: float,
) -> list[str]:
    """Withdraw unanswered requests for this same call whose process is gone: claude asks
    again after a restart, and one question must not be shown (and answered) twice."""
    stale = [
        row.request_id
        for row in pending_rows.list_unanswered(conn, session_id)
        if row.request_id not in waiting
        and row.tool_name == tool.tool_name
        and orphans.same_call(json.loads(row.input), tool.input)
    ]
    for request_id in stale:
        settle_cancelled(conn, request_id, now)
    return stale


def _tool_of(row: PendingPermission) -> CanUseTool:
    return CanUseTool(
        tool_name=row.tool_name,
        input=json.loads(row.input),
        tool_use_id=row.tool_use_id,
        description=row.tool_description,
    )


def _event_for_row(row: PendingPermission, *, is_replay: bool) -> agent_pb2.AgentEvent:
    tool = _tool_of(row)
    if row.is_question:
        return translate.user_question_event(row.request_id, tool, is_replay=is_replay)
    return translate.permission_request_event(
        row.request_id, tool, is_replay=is_replay, expires_at=int(row.expires_at)
    )
