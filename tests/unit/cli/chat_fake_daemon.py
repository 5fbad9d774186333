"""The chat's test double: just enough of AgentService, served by grpc.aio on a real Unix socket.

It keeps one session's event log (sequence = position + 1) and behaves like the daemon on the
wire: Converse replays the log after `from_sequence` then goes live (optionally re-sending a few
old events, as at-least-once delivery allows), re-sends pending prompts flagged `is_replay`,
and ResumeSessionBatched ends its history with an empty batch. Tests script the events with
`publish`, read what the client sent from `requests`, and cut streams with `drop_streams`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from betcode.server.app import RpcService, method_handlers
from betcode.v1 import agent_pb2, agent_pb2_grpc

SESSION_ID = "sess-0001"
DROP = None  # sentinel on a live queue: abort that stream
WAIT_SECONDS = 60.0  # for what the client sends: only guards against a hang (a loaded CI box)


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    metadata: dict[str, str] = dict(context.invocation_metadata() or ())
    return metadata.get("x-client-id", "")


@dataclass
class FakeAgentService(agent_pb2_grpc.AgentServiceServicer):
    log: list[agent_pb2.AgentEvent] = field(default_factory=list)
    overlap: int = 0  # Converse replays this many events before from_sequence again
    batch_size: int = 2  # events per ResumeSessionBatched message
    pending: list[agent_pb2.AgentEvent] = field(default_factory=list)  # re-sent on attach
    sessions: list[agent_pb2.SessionSummary] = field(default_factory=list)
    grant_lock: bool = True
    lock_answer: asyncio.Event | None = None  # set: RequestInputLock answers once it is set
    starts: list[tuple[str, agent_pb2.StartConversation]] = field(default_factory=list)
    created: set[str] = field(default_factory=set)  # ids of the new sessions clients chose
    resumes: list[agent_pb2.ResumeSessionRequest] = field(default_factory=list)
    unary: list[tuple[str, Any]] = field(default_factory=list)  # (method, request)
    requests: asyncio.Queue[tuple[str, agent_pb2.AgentRequest]] = field(
        default_factory=asyncio.Queue
    )
    attached: asyncio.Queue[str] = field(default_factory=asyncio.Queue)  # client id per Converse
    _live: list[asyncio.Queue[agent_pb2.AgentEvent | None]] = field(default_factory=list)

    # --- scripting ---------------------------------------------------------------------

    def publish(self, *events: agent_pb2.AgentEvent) -> None:
        """Stores the events under the next sequences and sends them to every open stream."""
        for event in events:
            event.sequence = len(self.log) + 1
            self.log.append(event)
            for queue in self._live:
                queue.put_nowait(event)

    def send_transient(self, event: agent_pb2.AgentEvent) -> None:
        """An event for the open streams only, outside the sequence (like a NO_INPUT_LOCK)."""
        for queue in self._live:
            queue.put_nowait(event)

    def drop_streams(self) -> None:
        for queue in self._live:
            queue.put_nowait(DROP)

    async def wait_attached(self) -> str:
        """Waits until a Converse stream has replayed and gone live; returns its client id."""
        return await asyncio.wait_for(self.attached.get(), WAIT_SECONDS)

    async def next_request(self, kind: str) -> agent_pb2.AgentRequest:
        """The next request the client sent on Converse, which must be of ``kind``."""
        _client, request = await asyncio.wait_for(self.requests.get(), WAIT_SECONDS)
        assert request.WhichOneof("request") == kind, request
        return request

    # --- AgentService ------------------------------------------------------------------

    # grpc.aio also serves a coroutine that streams with context.write, a form the generated
    # servicer stub (an iterator of events) does not describe.
    async def Converse(  # type: ignore[override]
        self, request_iterator: AsyncIterator[agent_pb2.AgentRequest], context: Any
    ) -> None:
        client = client_id_of(context)
        first = await anext(aiter(request_iterator))
        start = first.start
        self.starts.append((client, start))
        if start.session_id != SESSION_ID:
            try:  # like the daemon: an unknown UUID names the new session the client creates
                uuid.UUID(start.session_id)
            except ValueError:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"no session {start.session_id}")
            self.created.add(start.session_id)
        after = start.from_sequence if start.HasField("from_sequence") else 0
        queue: asyncio.Queue[agent_pb2.AgentEvent | None] = asyncio.Queue()
        self._live.append(queue)
        reader = asyncio.create_task(self._read(client, request_iterator))
        try:
            for event in [*self.log[max(0, after - self.overlap) :], *self._replays(after)]:
                await context.write(event)
            self.attached.put_nowait(client)
            while (live := await queue.get()) is not DROP:
                await context.write(live)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "dropped by the test")
        finally:
            self._live.remove(queue)
            reader.cancel()

    async def _read(self, client: str, requests: AsyncIterator[agent_pb2.AgentRequest]) -> None:
        async for request in requests:
            self.requests.put_nowait((client, request))

    def _replays(self, last_seen: int) -> Iterable[agent_pb2.AgentEvent]:
        for original in self.pending:
            event = agent_pb2.AgentEvent()
            event.CopyFrom(original)
            event.sequence = last_seen
            kind = event.WhichOneof("event")
            assert kind is not None, event
            getattr(event, kind).is_replay = True
            yield event

    async def ResumeSessionBatched(
        self, request: agent_pb2.ResumeSessionRequest, context: Any
    ) -> AsyncIterator[agent_pb2.AgentEventBatch]:
        self.resumes.append(request)
        if request.session_id != SESSION_ID:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no session {request.session_id}")
        history = self.log[request.from_sequence :]
        for index in range(0, len(history), self.batch_size):
            yield agent_pb2.AgentEventBatch(events=history[index : index + self.batch_size])
        yield agent_pb2.AgentEventBatch(events=list(self._replays(len(self.log))))
        yield agent_pb2.AgentEventBatch()  # the live edge
        await asyncio.Event().wait()  # live events would follow; the client stops reading

    async def ListSessions(
        self, request: agent_pb2.ListSessionsRequest, context: Any
    ) -> agent_pb2.ListSessionsResponse:
        self.unary.append(("ListSessions", request))
        wanted = request.working_directory
        sessions = [s for s in self.sessions if not wanted or s.working_directory == wanted]
        return agent_pb2.ListSessionsResponse(sessions=sessions, total=len(sessions))

    async def RequestInputLock(
        self, request: agent_pb2.InputLockRequest, context: Any
    ) -> agent_pb2.InputLockResponse:
        self.unary.append(("RequestInputLock", (client_id_of(context), request)))
        if self.lock_answer is not None:  # the holder's answer window, like the daemon's 10 s
            await self.lock_answer.wait()
        if self.grant_lock:
            lock = agent_pb2.InputLockChange(holder_client_id=client_id_of(context))
            self.publish(agent_pb2.AgentEvent(input_lock=lock))
        return agent_pb2.InputLockResponse(granted=self.grant_lock, previous_holder="cli-other")

    async def CancelTurn(
        self, request: agent_pb2.CancelTurnRequest, context: Any
    ) -> agent_pb2.CancelTurnResponse:
        if request.session_id != SESSION_ID:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no session {request.session_id}")
        self.unary.append(("CancelTurn", request))
        return agent_pb2.CancelTurnResponse(was_active=True)

    async def CompactSession(
        self, request: agent_pb2.CompactSessionRequest, context: Any
    ) -> agent_pb2.CompactSessionResponse:
        self.unary.append(("CompactSession", request))
        return agent_pb2.CompactSessionResponse(messages_before=4, messages_after=4)

    async def RenameSession(
        self, request: agent_pb2.RenameSessionRequest, context: Any
    ) -> agent_pb2.RenameSessionResponse:
        self.unary.append(("RenameSession", request))
        return agent_pb2.RenameSessionResponse()

    async def DeleteSession(
        self, request: agent_pb2.DeleteSessionRequest, context: Any
    ) -> agent_pb2.DeleteSessionResponse:
        self.unary.append(("DeleteSession", request))
        return agent_pb2.DeleteSessionResponse(deleted=True)

    async def ListSessionGrants(
        self, request: agent_pb2.ListSessionGrantsRequest, context: Any
    ) -> agent_pb2.ListSessionGrantsResponse:
        self.unary.append(("ListSessionGrants", request))
        grant = agent_pb2.SessionGrantEntry(tool_name="Bash(git *)", granted=True)
        return agent_pb2.ListSessionGrantsResponse(grants=[grant])

    async def ListPendingPermissions(
        self, request: agent_pb2.ListPendingPermissionsRequest, context: Any
    ) -> agent_pb2.ListPendingPermissionsResponse:
        self.unary.append(("ListPendingPermissions", request))
        pending = agent_pb2.PendingPermission(
            request_id="req-9", session_id=SESSION_ID, tool_name="Bash"
        )
        return agent_pb2.ListPendingPermissionsResponse(pending=[pending])

    async def AnswerPermission(
        self, request: agent_pb2.AnswerPermissionRequest, context: Any
    ) -> agent_pb2.AnswerPermissionResponse:
        self.unary.append(("AnswerPermission", request))
        return agent_pb2.AnswerPermissionResponse(accepted=True, outcome="allowed")


async def serve(
    service: FakeAgentService, socket_path: Path, also: Sequence[RpcService] = ()
) -> grpc.aio.Server:
    """The fake AgentService, and `also` real services (the chat's CommandService)."""
    server = grpc.aio.server()
    agent_pb2_grpc.add_AgentServiceServicer_to_server(service, server)
    for real in also:
        handlers = method_handlers(real)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(real.descriptor.full_name, handlers),)
        )
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    return server
