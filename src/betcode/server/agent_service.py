"""betcode.v1.AgentService: thin — validate, call the sessions/permissions domain, map errors.

Streaming methods yield already-serialized AgentEvent bytes (registered as raw responses): an
event is serialized once, at commit time, and the same bytes go to every client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import json_format

from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.decisions import AnswerError, ClientAnswer
from betcode.server import convert
from betcode.server.errors import BetCodeError, ErrorCode, handles_errors
from betcode.server.framing import encode_event_batch
from betcode.sessions import translate
from betcode.sessions.input_lock import NoInputLock
from betcode.sessions.manager import InvalidSessionRequest, SessionManager, SessionNotFound
from betcode.sessions.session import Session
from betcode.storage import grants as grant_rows
from betcode.storage import idempotency
from betcode.storage.grants import GrantAction
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.v1 import agent_pb2

log = logging.getLogger(__name__)

CLIENT_ID_METADATA = "x-client-id"
MAX_PROMPT_BYTES = 1024 * 1024
PER_EVENT_BATCH = 64  # frames taken per wake-up on the per-event stream
BATCH_MAX_EVENTS = 256
BATCH_MAX_BYTES = 4 * 1024 * 1024
OUTBOX_BATCHES = 4  # small, so a slow client backs up into its lag-detecting queue

RAW_RESPONSE_METHODS = frozenset({"Converse", "ResumeSession", "ResumeSessionBatched"})


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_METADATA and isinstance(value, str) and value:
            return value[:128]
    return f"anon-{uuid.uuid4()}"


def domain_error(exc: Exception) -> BetCodeError:
    """Maps domain exceptions onto the wire's error codes."""
    if isinstance(exc, SessionNotFound):
        return BetCodeError(ErrorCode.SESSION_NOT_FOUND, str(exc), {"session_id": exc.session_id})
    if isinstance(exc, InvalidSessionRequest):
        return BetCodeError(ErrorCode.INVALID_REQUEST, str(exc))
    if isinstance(exc, NoInputLock):
        return BetCodeError(
            ErrorCode.NO_INPUT_LOCK, str(exc), {"holder_client_id": exc.holder or ""}
        )
    if isinstance(exc, AnswerError):
        code = {
            "PERMISSION_NOT_FOUND": ErrorCode.PERMISSION_NOT_FOUND,
            "PERMISSION_STALE": ErrorCode.PERMISSION_STALE,
        }.get(exc.code, ErrorCode.INVALID_REQUEST)
        return BetCodeError(code, str(exc))
    raise exc


class AgentService:
    def __init__(
        self,
        sessions: SessionManager,
        bridge: PermissionBridge,
        writer: StoreWriter,
        reader: StoreReader,
    ) -> None:
        self._sessions = sessions
        self._bridge = bridge
        self._writer = writer
        self._reader = reader

    # ---- streams ----

    @handles_errors
    async def Converse(
        self, requests: AsyncIterator[agent_pb2.AgentRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        client_id = client_id_of(context)
        first = await anext(requests, None)
        if first is None or first.WhichOneof("request") != "start":
            raise BetCodeError(
                ErrorCode.INVALID_REQUEST, "the first request of Converse must be `start`"
            )
        start = first.start
        session = await self._open(start)
        after = start.from_sequence if start.HasField("from_sequence") else 0
        outbox: asyncio.Queue[list[bytes] | None] = asyncio.Queue(OUTBOX_BATCHES)
        stream = session.attach(
            client_id, after, max_count=PER_EVENT_BATCH, max_bytes=BATCH_MAX_BYTES
        )
        pump = asyncio.create_task(_pump(stream, outbox))
        reader = asyncio.create_task(self._read_requests(session, client_id, requests, outbox))
        try:
            while (batch := await outbox.get()) is not None:
                for data in batch:
                    yield data
        finally:
            reader.cancel()
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(reader, pump, return_exceptions=True)

    async def _open(self, start: agent_pb2.StartConversation) -> Session:
        try:
            if start.session_id:
                return await self._sessions.get(start.session_id)
            return await self._sessions.create(
                working_directory=start.working_directory,
                model=start.model,
                worktree_id=start.worktree_id or None,
                allowed_tools=list(start.allowed_tools),
            )
        except (SessionNotFound, InvalidSessionRequest) as exc:
            raise domain_error(exc) from exc

    async def _read_requests(
        self,
        session: Session,
        client_id: str,
        requests: AsyncIterator[agent_pb2.AgentRequest],
        outbox: asyncio.Queue[list[bytes] | None],
    ) -> None:
        async for request in requests:
            try:
                await self._handle(session, client_id, request)
            except BetCodeError as error:
                outbox.put_nowait([_transient_error(error)])
            except (NoInputLock, AnswerError, InvalidSessionRequest) as exc:
                outbox.put_nowait([_transient_error(domain_error(exc))])

    async def _handle(
        self, session: Session, client_id: str, request: agent_pb2.AgentRequest
    ) -> None:
        kind = request.WhichOneof("request")
        if kind == "message":
            await self._user_message(session, client_id, request.message)
        elif kind == "permission":
            session.lock.check_input(client_id)
            permission = request.permission
            await self._bridge.answer(
                session,
                ClientAnswer(
                    request_id=permission.request_id,
                    decision=permission.decision,
                    updated_input=_struct_or_none(permission, "updated_input"),
                    message=permission.message,
                    client_id=client_id,
                ),
            )
        elif kind == "question_response":
            session.lock.check_input(client_id)
            response = request.question_response
            await self._bridge.answer(
                session,
                ClientAnswer(
                    request_id=response.question_id,
                    answers=dict(response.answers),
                    client_id=client_id,
                ),
            )
        elif kind == "cancel":
            session.lock.check_input(client_id)
            await session.cancel_turn()
        else:
            raise BetCodeError(ErrorCode.INVALID_REQUEST, f"unexpected request `{kind}` mid-stream")

    async def _user_message(
        self, session: Session, client_id: str, message: agent_pb2.UserMessage
    ) -> None:
        size = len(message.content.encode())
        if size > MAX_PROMPT_BYTES:
            raise BetCodeError(
                ErrorCode.INVALID_REQUEST,
                f"the message is {size} bytes; at most {MAX_PROMPT_BYTES} bytes are accepted",
            )
        if not message.content.strip():
            raise BetCodeError(ErrorCode.INVALID_REQUEST, "the message is empty")
        if message.idempotency_key:
            key = message.idempotency_key
            fresh = await self._writer.call(
                lambda c: idempotency.remember_key(c, key, session.id, time.time())
            )
            if not fresh:
                return
        await session.send_user_message(client_id, message.content)

    @handles_errors
    async def ResumeSession(
        self, request: agent_pb2.ResumeSessionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        session = await self._get(request.session_id)
        stream = session.attach(
            client_id_of(context),
            request.from_sequence,
            max_count=PER_EVENT_BATCH,
            max_bytes=BATCH_MAX_BYTES,
            takes_input=False,
        )
        async for batch in stream:
            for _, data in batch:
                yield data

    @handles_errors
    async def ResumeSessionBatched(
        self, request: agent_pb2.ResumeSessionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Replay in batches; an EMPTY batch marks the live edge; then live batches."""
        session = await self._get(request.session_id)
        stream = session.attach(
            client_id_of(context),
            request.from_sequence,
            max_count=BATCH_MAX_EVENTS,
            max_bytes=BATCH_MAX_BYTES,
            takes_input=False,
            mark_caught_up=True,
        )
        async for batch in stream:
            yield encode_event_batch([data for _, data in batch])

    # ---- unary ----

    @handles_errors
    async def ListSessions(
        self, request: agent_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListSessionsResponse:
        page = await self._sessions.list(
            working_directory=request.working_directory,
            worktree_id=request.worktree_id,
            limit=request.limit,
            offset=request.offset,
        )
        return agent_pb2.ListSessionsResponse(
            sessions=[convert.session_summary(record) for record in page.sessions],
            total=page.total,
        )

    @handles_errors
    async def CancelTurn(
        self, request: agent_pb2.CancelTurnRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CancelTurnResponse:
        session = await self._get(request.session_id)
        return agent_pb2.CancelTurnResponse(was_active=await session.cancel_turn())

    @handles_errors
    async def RequestInputLock(
        self, request: agent_pb2.InputLockRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.InputLockResponse:
        session = await self._get(request.session_id)
        previous = session.lock.holder or ""
        granted = await session.request_input_lock(client_id_of(context))
        return agent_pb2.InputLockResponse(granted=granted, previous_holder=previous)

    @handles_errors
    async def RenameSession(
        self, request: agent_pb2.RenameSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.RenameSessionResponse:
        try:
            await self._sessions.rename(request.session_id, request.name)
        except (SessionNotFound, InvalidSessionRequest) as exc:
            raise domain_error(exc) from exc
        return agent_pb2.RenameSessionResponse()

    @handles_errors
    async def DeleteSession(
        self, request: agent_pb2.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.DeleteSessionResponse:
        try:
            deleted = await self._sessions.delete(request.session_id)
        except InvalidSessionRequest as exc:
            raise domain_error(exc) from exc
        if not deleted:
            raise domain_error(SessionNotFound(request.session_id))
        return agent_pb2.DeleteSessionResponse(deleted=True)

    @handles_errors
    async def CompactSession(
        self, request: agent_pb2.CompactSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CompactSessionResponse:
        """Compaction is claude's own `/compact`; the stored history is kept for replay."""
        session = await self._get(request.session_id)
        if session.turn_active:
            raise BetCodeError(
                ErrorCode.SESSION_ACTIVE, "Session has active turn", {"session_id": session.id}
            )
        before = (await self._sessions.record(session.id)).message_count
        await session.send_user_message(None, "/compact")
        return agent_pb2.CompactSessionResponse(messages_before=before, messages_after=before)

    @handles_errors
    async def ListSessionGrants(
        self, request: agent_pb2.ListSessionGrantsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListSessionGrantsResponse:
        record = await self._record(request.session_id)
        grants = await self._reader.read(lambda c: grant_rows.list_grants(c, record.id))
        return agent_pb2.ListSessionGrantsResponse(
            grants=[
                agent_pb2.SessionGrantEntry(
                    tool_name=grant.tool_name
                    if grant.pattern is None
                    else f"{grant.tool_name}({grant.pattern})",
                    granted=grant.action == "allow",
                )
                for grant in grants
            ]
        )

    @handles_errors
    async def ClearSessionGrants(
        self, request: agent_pb2.ClearSessionGrantsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ClearSessionGrantsResponse:
        record = await self._record(request.session_id)
        tool = request.tool_name or None
        await self._writer.call(lambda c: grant_rows.clear_grants(c, record.id, tool))
        return agent_pb2.ClearSessionGrantsResponse()

    @handles_errors
    async def SetSessionGrant(
        self, request: agent_pb2.SetSessionGrantRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.SetSessionGrantResponse:
        record = await self._record(request.session_id)
        if not request.tool_name:
            raise BetCodeError(ErrorCode.INVALID_REQUEST, "tool_name is required")
        action: GrantAction = "allow" if request.granted else "deny"
        await self._writer.call(
            lambda c: grant_rows.add_grant(c, record.id, request.tool_name, action, time.time())
        )
        return agent_pb2.SetSessionGrantResponse()

    @handles_errors
    async def ListPendingPermissions(
        self, request: agent_pb2.ListPendingPermissionsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListPendingPermissionsResponse:
        rows = await self._bridge.list_pending(request.session_id or None)
        return agent_pb2.ListPendingPermissionsResponse(
            pending=[convert.pending_permission(row) for row in rows]
        )

    @handles_errors
    async def AnswerPermission(
        self, request: agent_pb2.AnswerPermissionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.AnswerPermissionResponse:
        rows = await self._bridge.list_pending(request.session_id or None)
        session_id = request.session_id or next(
            (row.session_id for row in rows if row.request_id == request.request_id), ""
        )
        if not session_id:
            raise domain_error(AnswerError.not_found(request.request_id))
        session = await self._get(session_id)
        try:
            outcome = await self._bridge.answer(
                session,
                ClientAnswer(
                    request_id=request.request_id,
                    decision=request.decision,
                    updated_input=_struct_or_none(request, "updated_input"),
                    message=request.message,
                    answers=dict(request.answers),
                    client_id=client_id_of(context),
                ),
            )
        except AnswerError as exc:
            raise domain_error(exc) from exc
        return agent_pb2.AnswerPermissionResponse(
            accepted=outcome.accepted, duplicate=outcome.duplicate, outcome=outcome.outcome
        )

    # ---- helpers ----

    async def _get(self, session_id: str) -> Session:
        try:
            return await self._sessions.get(session_id)
        except (SessionNotFound, InvalidSessionRequest) as exc:
            raise domain_error(exc) from exc

    async def _record(self, session_id: str) -> Any:
        try:
            return await self._sessions.record(session_id)
        except (SessionNotFound, InvalidSessionRequest) as exc:
            raise domain_error(exc) from exc


async def _pump(
    stream: AsyncIterator[list[Any]], outbox: asyncio.Queue[list[bytes] | None]
) -> None:
    try:
        async for batch in stream:
            await outbox.put([data for _, data in batch])
    except Exception:
        log.exception("event stream failed")
    await outbox.put(None)


def _transient_error(error: BetCodeError) -> bytes:
    """An error for one client only: not stored, not sequenced (sequence 0)."""
    event = translate.error_event(error.code.value, error.message, details=error.details)
    return event.SerializeToString()


def _struct_or_none(message: Any, field: str) -> dict[str, Any] | None:
    if not message.HasField(field):
        return None
    return dict(json_format.MessageToDict(getattr(message, field)))
