"""One session's Converse stream, healed after drops: each event delivered once, nothing lost.

``ConversationStream`` owns the client's view of the session's sequence. It remembers the last
sequence it delivered; after a drop it waits (100 ms doubling to 30 s), reopens ``Converse``
with ``from_sequence`` = that sequence and drops anything at or below it, so the caller never
sees an event twice nor misses one. Requests made while the stream is down are sent once it is
back; requests written just before a drop and not yet echoed by the daemon are sent once more
(with the same idempotency key, or answering the same request id, so the daemon applies them
once).

While a stream is open it sends a heartbeat (an empty AgentRequest) every 15 s, so the daemon
can tell a quiet client from a stopped or hung one (docs/GRPC.md#silent-clients): once a client has
sent a heartbeat, the daemon drops it after 30 s of silence and passes its input lock on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from google.protobuf.struct_pb2 import Struct

from betcode.cli.connection import DaemonClient, daemon_error
from betcode.v1 import agent_pb2, common_pb2

CLIENT_TYPE = "cli"
HEARTBEAT_INTERVAL_SECONDS = 15.0  # half the daemon's 30 s silence timeout, with room to spare
HEARTBEAT = agent_pb2.AgentRequest()
DROP_REASON_CHARS = 80
RETRYABLE_STATUS = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
    }
)


def reconnect_delays(
    initial: float = 0.1, factor: float = 2.0, cap: float = 30.0
) -> Iterator[float]:
    """100 ms, 200 ms, 400 ms, … doubling, capped at 30 s (docs/GRPC.md#reconnecting)."""
    delay = initial
    while True:
        yield min(delay, cap)
        delay *= factor


def drop_reason(status: grpc.StatusCode, details: str) -> str:
    """Why the stream dropped, short enough for a status bar: the daemon's own reason, but not
    gRPC's connect failures (they spell out socket addresses and resolver internals)."""
    text = " ".join(details.split())
    if not text or text.startswith("failed to connect"):
        if status == grpc.StatusCode.UNAVAILABLE:
            return "the daemon is not reachable"
        name: str = status.name
        return name.lower().replace("_", " ")
    return text if len(text) <= DROP_REASON_CHARS else text[: DROP_REASON_CHARS - 1] + "…"


@dataclass(frozen=True)
class ConnectionChange:
    """The stream went up, or down (then ``retry_in`` says when the next attempt is)."""

    connected: bool
    retry_in: float = 0.0
    reason: str = ""


StreamItem = agent_pb2.AgentEvent | ConnectionChange


@dataclass
class _Outgoing:
    request: agent_pb2.AgentRequest
    resent: bool = False


def _is_replay(event: agent_pb2.AgentEvent) -> bool:
    kind = event.WhichOneof("event")
    if kind == "permission_request":
        return event.permission_request.is_replay
    if kind == "user_question":
        return event.user_question.is_replay
    return False


def _acknowledges(event: agent_pb2.AgentEvent, request: agent_pb2.AgentRequest) -> bool:
    """Whether the event shows the daemon acted on the request: a message comes back as the
    session's UserInput, an answer as PermissionResolved."""
    kind = event.WhichOneof("event")
    sent = request.WhichOneof("request")
    if kind == "user_input":
        return sent == "message" and request.message.content == event.user_input.content
    if kind == "permission_resolved":
        request_id = event.permission_resolved.request_id
        return (sent == "permission" and request.permission.request_id == request_id) or (
            sent == "question_response" and request.question_response.question_id == request_id
        )
    return False


class ConversationStream:
    def __init__(
        self,
        client: DaemonClient,
        *,
        session_id: str = "",
        working_directory: str = "",
        model: str = "",
        worktree_id: str = "",
        last_sequence: int = 0,
        delays: Callable[[], Iterator[float]] = reconnect_delays,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_SECONDS,
    ) -> None:
        self._client = client
        self._heartbeat_interval = heartbeat_interval
        self.session_id = session_id
        self.working_directory = working_directory
        self.model = model
        self.worktree_id = worktree_id  # a new session runs in this worktree
        self.last_sequence = last_sequence
        self._delays = delays
        self._call: Any = None
        self._outbox: list[_Outgoing] = []  # not written yet
        self._unacked: list[_Outgoing] = []  # written on the current call, not yet echoed
        self._write_lock = asyncio.Lock()

    def _fresh(self, event: agent_pb2.AgentEvent) -> bool:
        """Whether to deliver the event; moves ``last_sequence``. At-least-once delivery means
        old sequences may come again: they are dropped. Events outside the sequence (sequence
        0: errors meant for this client only) and re-sent pending prompts (is_replay, carrying
        an old sequence) are delivered as they come; the view handles those by request id."""
        if event.sequence == 0 or _is_replay(event):
            return True
        if event.sequence <= self.last_sequence:
            return False
        self.last_sequence = event.sequence
        return True

    async def catch_up(self) -> AsyncIterator[list[agent_pb2.AgentEvent]]:
        """The stored history after ``last_sequence``, in batches (ResumeSessionBatched), up to
        the live edge, which the daemon marks with an empty batch; ``items()`` continues from
        there."""
        if not self.session_id:
            return
        call = self._client.open_resume_batched(self.session_id, self.last_sequence, follow=False)
        try:
            while (batch := await call.read()) is not grpc.aio.EOF and batch.events:
                fresh = [event for event in batch.events if self._fresh(event)]
                if fresh:
                    yield fresh
        except grpc.aio.AioRpcError as error:
            raise daemon_error(error, self._client.address) from None
        finally:
            call.cancel()

    def _start_request(self) -> agent_pb2.AgentRequest:
        start = agent_pb2.StartConversation(
            session_id=self.session_id,
            working_directory=self.working_directory,
            model=self.model,
            worktree_id=self.worktree_id,
            client_type=CLIENT_TYPE,
        )
        if self.session_id:  # without it, the daemon would send only what comes from now on
            start.from_sequence = self.last_sequence
        return agent_pb2.AgentRequest(start=start)

    async def items(self) -> AsyncGenerator[StreamItem, None]:
        """Events (each once, in sequence order) and connection changes, until a fatal error
        event, or a refusal that retrying cannot fix (raised as a DaemonError)."""
        if not self.session_id:
            # A new session's id is ours, not the daemon's: a reconnect after a drop before its
            # SessionInfo came opens that session again instead of creating a second one.
            self.session_id = str(uuid.uuid4())
        delays = self._delays()
        while True:
            call = self._client.open_converse()
            reason = "the daemon closed the stream"
            heartbeats: asyncio.Task[None] | None = None
            try:
                await call.write(self._start_request())
                async with self._write_lock:
                    self._call = call
                    await self._flush_outbox(call)
                heartbeats = asyncio.create_task(self._send_heartbeats(call))
                yield ConnectionChange(connected=True)
                while (event := await call.read()) is not grpc.aio.EOF:
                    before = self.last_sequence
                    if not self._fresh(event):
                        continue
                    if self.last_sequence > before:
                        delays = self._delays()  # healthy again: the next drop starts at 100 ms
                    self._unacked = [
                        o for o in self._unacked if not _acknowledges(event, o.request)
                    ]
                    yield event
                    if event.WhichOneof("event") == "error" and event.error.is_fatal:
                        return
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRYABLE_STATUS:
                    raise daemon_error(error, self._client.address) from None
                reason = drop_reason(error.code(), error.details() or "")
            except asyncio.InvalidStateError:
                pass  # the call ended between two writes; the reason above stands
            finally:
                if heartbeats is not None:
                    heartbeats.cancel()
                self._call = None
                call.cancel()
                self._requeue_unacked()
            delay = next(delays)
            yield ConnectionChange(connected=False, retry_in=delay, reason=reason)
            await asyncio.sleep(delay)

    async def _send_heartbeats(self, call: Any) -> None:
        """Every interval, tells the daemon this client is still there, until the call ends."""
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            async with self._write_lock:
                if self._call is not call or call.done():
                    return
                try:
                    await call.write(HEARTBEAT)
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    return  # the reading side sees the drop and reconnects

    def _requeue_unacked(self) -> None:
        """Requests the broken call may have lost go out again, once."""
        again = [outgoing for outgoing in self._unacked if not outgoing.resent]
        for outgoing in again:
            outgoing.resent = True
        self._outbox[:0] = again
        self._unacked = []

    async def _write(self, call: Any, outgoing: _Outgoing) -> None:
        await call.write(outgoing.request)
        if outgoing.request.WhichOneof("request") != "cancel":  # a late cancel could hit a new turn
            self._unacked.append(outgoing)

    async def _flush_outbox(self, call: Any) -> None:
        while self._outbox:
            await self._write(call, self._outbox[0])
            self._outbox.pop(0)

    async def _send(self, request: agent_pb2.AgentRequest) -> None:
        """Writes now, or keeps it for the next connection when the stream is down."""
        outgoing = _Outgoing(request)
        async with self._write_lock:
            call = self._call
            if call is None or call.done():
                self._outbox.append(outgoing)
                return
            try:
                await self._write(call, outgoing)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                self._outbox.append(outgoing)

    async def send_message(self, content: str) -> None:
        message = agent_pb2.UserMessage(content=content, idempotency_key=str(uuid.uuid4()))
        await self._send(agent_pb2.AgentRequest(message=message))

    async def answer_permission(
        self,
        request_id: str,
        decision: common_pb2.PermissionDecision.ValueType,
        *,
        message: str = "",
        updated_input: Mapping[str, Any] | None = None,
    ) -> None:
        response = agent_pb2.PermissionResponse(
            request_id=request_id,
            decision=decision,
            message=message,
            idempotency_key=str(uuid.uuid4()),
        )
        if updated_input is not None:
            edited = Struct()
            edited.update(dict(updated_input))
            response.updated_input.CopyFrom(edited)
        await self._send(agent_pb2.AgentRequest(permission=response))

    async def answer_question(self, question_id: str, answers: Mapping[str, str]) -> None:
        response = agent_pb2.UserQuestionResponse(question_id=question_id, answers=dict(answers))
        await self._send(agent_pb2.AgentRequest(question_response=response))

    async def cancel_turn(self, reason: str = "cancelled by the user") -> None:
        await self._send(agent_pb2.AgentRequest(cancel=agent_pb2.CancelRequest(reason=reason)))
