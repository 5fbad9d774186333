"""The permission bridge: claude's `can_use_tool` requests ⇄ the clients' answers.

Every request that no rule decides is stored in `pending_permissions` BEFORE any client sees
it, then shown to every client of the session. The first answer wins (a compare-and-swap in
SQLite); a duplicate answer succeeds and changes nothing. The stored row outlives clients,
claude processes and the daemon itself.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from betcode.permissions.decisions import (
    AnswerError,
    AnswerOutcome,
    ClientAnswer,
    build_reply,
)
from betcode.protocol import writer as stdin
from betcode.protocol.messages import CanUseTool, ControlRequest
from betcode.sessions import translate
from betcode.sessions.fanout import Frame
from betcode.sessions.session import Session
from betcode.storage import grants as grant_rows
from betcode.storage import pending as pending_rows
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.v1 import agent_pb2, common_pb2

log = logging.getLogger(__name__)

ASK_USER_QUESTION = "AskUserQuestion"


@dataclass(slots=True)
class LiveRequest:
    """A request claude is waiting on right now, in the process that asked."""

    request: ControlRequest
    tool: CanUseTool
    process_pid: int | None


class PermissionBridge:
    def __init__(self, writer: StoreWriter, reader: StoreReader, *, ttl_seconds: float) -> None:
        self._writer = writer
        self._reader = reader
        self.ttl_seconds = ttl_seconds
        self._live: dict[str, dict[str, LiveRequest]] = {}
        self._sessions: dict[str, Session] = {}

    # ---- from claude ----

    async def on_control_request(self, session: Session, request: ControlRequest) -> None:
        self._sessions[session.id] = session
        tool = request.request
        if not isinstance(tool, CanUseTool):
            # BetCode registers no hooks or SDK MCP servers: say so, never leave claude waiting.
            await session.write_control(
                stdin.control_error(request.request_id, "not supported by BetCode", request.dialect)
            )
            return
        await self._forward(session, request, tool)

    async def _forward(self, session: Session, request: ControlRequest, tool: CanUseTool) -> None:
        now = time.time()
        is_question = tool.tool_name == ASK_USER_QUESTION
        await self._writer.call(
            lambda c: pending_rows.insert_pending(
                c,
                request_id=request.request_id,
                session_id=session.id,
                tool_name=tool.tool_name,
                input_json=json.dumps(tool.input),
                dialect=str(request.dialect),
                received_at=now,
                expires_at=now + self.ttl_seconds,
                tool_description=tool.description or tool.decision_reason,
                tool_use_id=tool.tool_use_id,
                is_question=is_question,
            )
        )
        self._live.setdefault(session.id, {})[request.request_id] = LiveRequest(
            request, tool, session.supervisor.pid
        )
        event = (
            translate.user_question_event(request.request_id, tool)
            if is_question
            else translate.permission_request_event(request.request_id, tool)
        )
        session.emit(
            [event, translate.status_event(common_pb2.AgentStatus.AGENT_STATUS_WAITING_FOR_USER)]
        )
        session.background_write(
            lambda c: pending_rows.mark_forwarded(c, request.request_id, time.time())
        )

    async def on_cancel(self, session: Session, request_id: str) -> None:
        live = self._live.get(session.id, {}).pop(request_id, None)
        won = await self._writer.call(
            lambda c: pending_rows.answer(
                c, request_id, decision="cancelled", payload="{}", now=time.time()
            )
        )
        if live is not None or won:
            session.emit([translate.permission_resolved_event(request_id, "cancelled")])

    async def on_session_activity(self, session: Session) -> None:
        self._sessions[session.id] = session

    def has_pending(self, session_id: str) -> bool:
        return bool(self._live.get(session_id))

    async def replay_frames(self, session: Session, last_seq: int) -> list[Frame]:
        rows = await self._reader.read(lambda c: pending_rows.list_unanswered(c, session.id))
        frames: list[Frame] = []
        for row in rows:
            event = self._event_for_row(row, is_replay=True)
            # A replayed request reuses the latest seq the client has seen: it is a reminder of
            # state, not a new event, and clients handle it idempotently by request id.
            event.sequence = last_seq
            frames.append((last_seq, event.SerializeToString()))
        return frames

    # ---- from clients ----

    async def answer(self, session: Session, answer: ClientAnswer) -> AnswerOutcome:
        row = await self._reader.read(lambda c: pending_rows.get_pending(c, answer.request_id))
        if row is None or row.session_id != session.id:
            raise AnswerError.not_found(answer.request_id)
        if row.response_received:
            return AnswerOutcome(accepted=True, duplicate=True, outcome=row.response_decision or "")
        if row.expires_at <= time.time():
            raise AnswerError.stale(answer.request_id)
        reply = build_reply(row, answer)
        won = await self._writer.call(
            lambda c: pending_rows.answer(
                c,
                answer.request_id,
                decision=reply.decision,
                payload=reply.line.decode(),
                now=time.time(),
            )
        )
        if not won:
            current = await self._reader.read(
                lambda c: pending_rows.get_pending(c, answer.request_id)
            )
            outcome = current.response_decision if current is not None else ""
            return AnswerOutcome(accepted=True, duplicate=True, outcome=outcome or "")
        if reply.grant is not None:
            grant = reply.grant
            await self._writer.call(
                lambda c: grant_rows.add_grant(
                    c, session.id, grant.tool_name, "allow", time.time(), pattern=grant.pattern
                )
            )
        await self._deliver(session, row, reply.line)
        session.emit(
            [
                translate.permission_resolved_event(
                    answer.request_id,
                    reply.outcome,
                    message=answer.message,
                    decided_by_client_id=answer.client_id or "",
                )
            ]
        )
        return AnswerOutcome(accepted=True, duplicate=False, outcome=reply.outcome)

    async def _deliver(
        self, session: Session, row: pending_rows.PendingPermission, line: bytes
    ) -> None:
        live = self._live.get(session.id, {}).pop(row.request_id, None)
        if live is None or live.process_pid != session.supervisor.pid:
            log.warning(
                "session %s: answer to %s arrived after the claude process that asked was gone",
                session.id,
                row.request_id,
            )
            return
        await session.write_control(line)
        await self._writer.call(lambda c: pending_rows.mark_delivered(c, row.request_id))

    async def list_pending(self, session_id: str | None) -> list[pending_rows.PendingPermission]:
        return await self._reader.read(lambda c: pending_rows.list_unanswered(c, session_id))

    def _event_for_row(
        self, row: pending_rows.PendingPermission, *, is_replay: bool
    ) -> agent_pb2.AgentEvent:
        tool = CanUseTool(
            tool_name=row.tool_name,
            input=json.loads(row.input),
            tool_use_id=row.tool_use_id,
            description=row.tool_description,
        )
        if row.is_question:
            return translate.user_question_event(row.request_id, tool, is_replay=is_replay)
        return translate.permission_request_event(row.request_id, tool, is_replay=is_replay)
