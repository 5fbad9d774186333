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
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from betcode.core import convert
from betcode.core.connected import ConnectedClients
from betcode.core.converse import CLIENT_SILENCE_TIMEOUT_SECONDS, ConverseRequests, note_activity
from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.event_pump import (
    BATCH_MAX_BYTES,
    BATCH_MAX_EVENTS,
    OUTBOX_BATCHES,
    PER_EVENT_BATCH,
    pump_batches,
)
from betcode.core.validation import (
    DEFAULT_CLIENT_TYPE,
    check_answers,
    check_client_type,
    check_id,
    check_name,
    check_text,
    domain_error,
    input_object,
    invalid,
)
from betcode.limits.admission import TurnAdmission
from betcode.observability.hooks import incoming_traceparent
from betcode.observability.logs import bind_log_fields
from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.decisions import AnswerError, ClientAnswer
from betcode.remote.frames import ACK_METADATA, ACK_RECORDED
from betcode.server.errors import translates_errors
from betcode.server.framing import encode_event_batch
from betcode.sessions.input_lock import NoInputLock
from betcode.sessions.manager import SessionManager, SessionNotFound
from betcode.sessions.session import STREAMS_ENDED, Session, StreamsEnded
from betcode.storage import grants as grant_rows
from betcode.storage.grants import GrantAction
from betcode.storage.reader import StoreReader
from betcode.storage.spend import SessionSpend
from betcode.storage.writer import StoreWriter
from betcode.v1 import agent_pb2

log = logging.getLogger(__name__)

CLIENT_ID_METADATA = "x-client-id"
TRACEPARENT_METADATA = "traceparent"  # W3C trace context: the turns of this stream continue it
# claude runs it itself in stream-json mode (docs/PROTOCOL.md#slash-commands)
COMPACT_COMMAND = "/compact"

RAW_RESPONSE_METHODS = frozenset({"Converse", "ResumeSession", "ResumeSessionBatched"})

# Every method: a BetCodeError or a domain refusal ends the call with its status and message.
serves = translates_errors(domain_error)


def _metadata_value(context: grpc.aio.ServicerContext, key: str) -> str:
    for name, value in context.invocation_metadata() or ():
        if name == key and isinstance(value, str):
            return value[:256]
    return ""


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_METADATA and isinstance(value, str) and value:
            return value[:128]
    return f"anon-{uuid.uuid4()}"


class AgentService:
    def __init__(
        self,
        sessions: SessionManager,
        bridge: PermissionBridge,
        writer: StoreWriter,
        reader: StoreReader,
        admission: TurnAdmission,
        *,
        client_silence: Callable[[], float] = lambda: CLIENT_SILENCE_TIMEOUT_SECONDS,
    ) -> None:
        self._sessions = sessions
        self._bridge = bridge
        self._writer = writer
        self._reader = reader
        self._admission = admission
        self._clients = ConnectedClients(writer)
        self._converse = ConverseRequests(
            bridge, writer, self._clients, admission, silence_timeout=client_silence
        )

    # ---- streams ----

    @serves
    async def Converse(
        self, requests: AsyncIterator[agent_pb2.AgentRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """The first request must be `start`. Mid-stream, a request that fails is answered with
        an error event for this client only, and the stream goes on; an empty AgentRequest is
        a heartbeat. Replay only from `start.from_sequence`; without it, live only (a session
        this start created is all new: it comes whole)."""
        client_id = client_id_of(context)
        first = await anext(requests, None)
        if first is None or first.WhichOneof("request") != "start":
            raise BetCodeError(
                ErrorCode.INVALID_REQUEST, "the first request of Converse must be `start`"
            )
        start = first.start
        client_type = check_client_type(start.client_type)
        session, created = await self._open(start, client_id)
        bind_log_fields(session_id=session.id)  # this stream's records, and its tasks'
        incoming_traceparent.set(_metadata_value(context, TRACEPARENT_METADATA))
        after: int | None = None
        if start.HasField("from_sequence"):
            after = start.from_sequence
        elif created:
            after = 0
        outbox: asyncio.Queue[list[bytes] | None] = asyncio.Queue(OUTBOX_BATCHES)
        stream = session.attach(
            client_id, after, max_count=PER_EVENT_BATCH, max_bytes=BATCH_MAX_BYTES
        )
        with self._clients.attached(client_id, session.id, client_type):
            pump = asyncio.create_task(pump_batches(stream, outbox))
            # A caller that asks for it (a message the relay kept for an offline machine) is
            # answered by the end of the call once its requests are handled.
            until_recorded = _metadata_value(context, ACK_METADATA) == ACK_RECORDED
            reader = asyncio.create_task(
                self._converse.serve(
                    session, client_id, requests, outbox, end_on_half_close=until_recorded
                )
            )
            try:
                while (batch := await outbox.get()) is not None:
                    for data in batch:
                        yield data
            finally:
                reader.cancel()
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.gather(reader, pump, return_exceptions=True)
        _raise_if_stopping(session)

    async def _open(
        self, start: agent_pb2.StartConversation, client_id: str
    ) -> tuple[Session, bool]:
        """The session `start` names, or a new one (then True): with the id the client chose
        when it names none that exists."""
        options: dict[str, Any] = {
            "working_directory": start.working_directory,
            "model": check_id(start.model, "model", required=False),
            "worktree_id": check_id(start.worktree_id, "worktree_id", required=False) or None,
            "allowed_tools": list(start.allowed_tools),
            "client_id": client_id,
        }
        if not start.session_id:
            return await self._sessions.create(**options), True
        session_id = check_id(start.session_id, "session_id")
        session, created = await self._sessions.get_or_create(session_id, **options)
        if not created:
            await self._session(session.id, client_id)  # activity on an existing session
        return session, created

    @serves
    async def ResumeSession(
        self, request: agent_pb2.ResumeSessionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """The stored events, then the end of the stream, or live ones with `follow`."""
        async for batch in self._watch(
            request, context, max_count=PER_EVENT_BATCH, follow=request.follow
        ):
            for data in batch:
                yield data

    @serves
    async def ResumeSessionBatched(
        self, request: agent_pb2.ResumeSessionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Replay in batches; an EMPTY batch marks the live edge; then live batches unless
        `follow` is set to false."""
        follow = request.follow if request.HasField("follow") else True
        async for batch in self._watch(
            request, context, max_count=BATCH_MAX_EVENTS, mark_caught_up=True, follow=follow
        ):
            yield encode_event_batch(batch)

    async def _watch(
        self,
        request: agent_pb2.ResumeSessionRequest,
        context: grpc.aio.ServicerContext,
        *,
        max_count: int,
        follow: bool,
        mark_caught_up: bool = False,
    ) -> AsyncIterator[list[bytes]]:
        """A read-only attachment: replay from `from_sequence`, then (`follow`) live, as
        encoded events."""
        client_id = client_id_of(context)
        session = await self._session(request.session_id, client_id)
        stream = session.attach(
            client_id,
            request.from_sequence,
            max_count=max_count,
            max_bytes=BATCH_MAX_BYTES,
            takes_input=False,
            mark_caught_up=mark_caught_up,
            follow=follow,
        )
        with self._clients.attached(client_id, session.id, DEFAULT_CLIENT_TYPE):
            async with contextlib.aclosing(stream):
                async for batch in stream:
                    yield [data for _, data in batch]

    # ---- unary ----

    @serves
    async def ListSessions(
        self, request: agent_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListSessionsResponse:
        page = await self._sessions.list(
            working_directory=request.working_directory,
            worktree_id=request.worktree_id,
            limit=request.limit,
            offset=request.offset,
        )
        summaries = await convert.session_summaries(page.sessions)
        await self._admission.describe(summaries)
        return agent_pb2.ListSessionsResponse(sessions=summaries, total=page.total)

    @serves
    async def CancelTurn(
        self, request: agent_pb2.CancelTurnRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CancelTurnResponse:
        session = await self._session(request.session_id, client_id_of(context))
        dropped = self._admission.cancel(session)
        return agent_pb2.CancelTurnResponse(was_active=await session.cancel_turn() or dropped > 0)

    @serves
    async def RequestInputLock(
        self, request: agent_pb2.InputLockRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.InputLockResponse:
        client_id = client_id_of(context)
        session = await self._session(request.session_id, client_id)
        previous = session.lock.holder or ""
        granted = await session.request_input_lock(client_id)
        return agent_pb2.InputLockResponse(granted=granted, previous_holder=previous)

    @serves
    async def RenameSession(
        self, request: agent_pb2.RenameSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.RenameSessionResponse:
        name = check_name(request.name, "name")
        session = await self._session(request.session_id, client_id_of(context))
        await self._sessions.rename(session.id, name)
        return agent_pb2.RenameSessionResponse()

    @serves
    async def MoveSession(
        self, request: agent_pb2.MoveSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.MoveSessionResponse:
        session_id = check_id(request.session_id, "session_id")
        if not request.working_directory:
            raise invalid("working_directory is required")
        record = await self._sessions.move(session_id, request.working_directory)
        summaries = await convert.session_summaries([record])
        await self._admission.describe(summaries)
        [summary] = summaries
        return agent_pb2.MoveSessionResponse(session=summary)

    @serves
    async def DeleteSession(
        self, request: agent_pb2.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.DeleteSessionResponse:
        session_id = check_id(request.session_id, "session_id")
        if not await self._sessions.delete(session_id, client_id_of(context)):
            raise SessionNotFound(session_id)
        return agent_pb2.DeleteSessionResponse(deleted=True)

    @serves
    async def CompactSession(
        self, request: agent_pb2.CompactSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CompactSessionResponse:
        """Starts claude's own `/compact` (a turn of its own, ending in a result); the stored
        history is kept for replay. Only between turns, and not past another client's lock."""
        client_id = client_id_of(context)
        session = await self._session(request.session_id, client_id)
        before = (await self._sessions.record(session.id)).message_count
        holder = session.lock.holder
        if holder is not None and holder != client_id:
            raise NoInputLock(client_id, holder)
        if session.turn_active:
            raise BetCodeError(
                ErrorCode.SESSION_ACTIVE,
                "the session is in the middle of a turn; compact it when the turn is over",
                {"session_id": session.id},
            )
        if session.claude_session_id is None:
            raise BetCodeError(
                ErrorCode.NOTHING_TO_COMPACT,
                "the session has no conversation to compact yet; send a message first",
                {"session_id": session.id},
            )
        await session.send_user_message(holder, COMPACT_COMMAND)
        return agent_pb2.CompactSessionResponse(messages_before=before, messages_after=before)

    @serves
    async def ListSessionGrants(
        self, request: agent_pb2.ListSessionGrantsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListSessionGrantsResponse:
        session = await self._session(request.session_id, client_id_of(context))
        grants = await self._reader.read(lambda c: grant_rows.list_grants(c, session.id))
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

    @serves
    async def ClearSessionGrants(
        self, request: agent_pb2.ClearSessionGrantsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ClearSessionGrantsResponse:
        tool = check_id(request.tool_name, "tool_name", required=False) or None
        session = await self._session(request.session_id, client_id_of(context))
        await self._writer.call(lambda c: grant_rows.clear_grants(c, session.id, tool))
        return agent_pb2.ClearSessionGrantsResponse()

    @serves
    async def SetSessionGrant(
        self, request: agent_pb2.SetSessionGrantRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.SetSessionGrantResponse:
        tool = check_id(request.tool_name, "tool_name")
        session = await self._session(request.session_id, client_id_of(context))
        action: GrantAction = "allow" if request.granted else "deny"
        await self._writer.call(
            lambda c: grant_rows.add_grant(c, session.id, tool, action, time.time())
        )
        return agent_pb2.SetSessionGrantResponse()

    @serves
    async def ListPendingPermissions(
        self, request: agent_pb2.ListPendingPermissionsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListPendingPermissionsResponse:
        session_id: str | None = None
        if request.session_id:
            session_id = (await self._session(request.session_id, client_id_of(context))).id
        rows = await self._bridge.list_pending(session_id)
        return agent_pb2.ListPendingPermissionsResponse(
            pending=[convert.pending_permission(row) for row in rows]
        )

    @serves
    async def AnswerPermission(
        self, request: agent_pb2.AnswerPermissionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.AnswerPermissionResponse:
        """Answers a request of any session from any terminal: the session is the request's
        own, or the one named (its own, or one of its subagents': one inbox, as on its Converse
        stream). A repeated answer succeeds and changes nothing (`duplicate`)."""
        client_id = client_id_of(context)
        answer = ClientAnswer(
            request_id=check_id(request.request_id, "request_id"),
            decision=request.decision,
            updated_input=input_object(request, "updated_input"),
            message=check_text(request.message, "message"),
            answers=check_answers(request.answers, "answers"),
            client_id=client_id,
        )
        named = check_id(request.session_id, "session_id", required=False)
        if named:
            # The bridge finds the asking session among the named one and its subagents'.
            session = await self._session(named, client_id)
        else:
            row = await self._bridge.find_request(answer.request_id)
            if row is None:
                raise AnswerError.not_found(answer.request_id)
            session = await self._session(row.session_id, client_id)
        outcome = await self._bridge.answer(session, answer)
        return agent_pb2.AnswerPermissionResponse(
            accepted=outcome.accepted, duplicate=outcome.duplicate, outcome=outcome.outcome
        )

    @serves
    async def SetSessionLimits(
        self, request: agent_pb2.SetSessionLimitsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.SetSessionLimitsResponse:
        session = await self._session(request.session_id, client_id_of(context))
        cost = request.cost_usd if request.HasField("cost_usd") else None
        return self._limits_response(await self._admission.set_session_limit(session.id, cost))

    @serves
    async def GetSessionLimits(
        self, request: agent_pb2.GetSessionLimitsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.SetSessionLimitsResponse:
        session = await self._session(request.session_id, client_id_of(context))
        return self._limits_response(await self._admission.spend(session.id))

    def _limits_response(self, spend: SessionSpend) -> agent_pb2.SetSessionLimitsResponse:
        daily = self._admission.settings.daily_cost_usd
        return agent_pb2.SetSessionLimitsResponse(
            spent_usd=spend.total_usd,
            cost_limit_usd=self._admission.session_limit(spend) or 0.0,
            own_limit=spend.own_limit_usd is not None,
            day_spent_usd=spend.day_total_usd,
            daily_limit_usd=daily + spend.day_allowance_usd if daily else 0.0,
        )

    # ---- helpers ----

    async def _session(self, session_id: str, client_id: str) -> Session:
        """The session a request names, checked and loaded. Every request in a session is
        client activity: it pushes back the expiry of the session's pending permissions."""
        session = await self._sessions.get(check_id(session_id, "session_id"))
        bind_log_fields(session_id=session.id)
        self._clients.seen(client_id)
        await note_activity(self._bridge, session)
        return session


def _raise_if_stopping(session: Session) -> None:
    """A Converse the stopping daemon ended (its pump took the StreamsEnded) ends UNAVAILABLE
    (DAEMON_STOPPED), not OK: its client reconnects, and the next daemon replays from its last
    sequence."""
    if session.streams_ended:
        raise StreamsEnded(STREAMS_ENDED)
