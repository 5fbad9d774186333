"""The requests one client sends on its Converse stream, after `start`.

Each is checked, then handed to the session or the permission bridge. A request that fails is
answered with an error event for this client only (sequence 0: neither stored nor shown to
others) and the stream goes on. An AgentRequest with no field set is a heartbeat.

Silent clients (docs/GRPC.md#silent-clients):
the rule applies only to a client that has sent at least one heartbeat. Before BetCode's own
clients sent heartbeats, none did, and an idle but healthy client (a chat nobody types in) is
indistinguishable from a hung one by silence alone; dropping those would cut off every older
or third-party client every 30 s. A client that heartbeats has promised to keep doing so, so
its silence means it is stopped or hung: its stream is closed (after a non-fatal CLIENT_SILENT
error saying why, so a client that wakes up reconnects from its last sequence), which detaches
it, removes its connected_clients row and passes its input lock on. A client that stopped
reading too (its stream blocked on flow control) is ended by the server's HTTP/2 keepalive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

from betcode.core.connected import ConnectedClients
from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.validation import (
    check_answers,
    check_id,
    check_text,
    domain_error,
    input_object,
)
from betcode.limits.admission import TurnAdmission
from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.decisions import ClientAnswer
from betcode.sessions import translate
from betcode.sessions.session import Session
from betcode.storage import idempotency
from betcode.storage.writer import StoreWriter
from betcode.v1 import agent_pb2

log = logging.getLogger(__name__)

# The default of docs/GRPC.md#silent-clients; the daemon passes `daemon.client_silence_seconds`.
CLIENT_SILENCE_TIMEOUT_SECONDS = 30.0


class ConverseRequests:
    def __init__(
        self,
        bridge: PermissionBridge,
        writer: StoreWriter,
        clients: ConnectedClients,
        admission: TurnAdmission,
        *,
        silence_timeout: Callable[[], float] = lambda: CLIENT_SILENCE_TIMEOUT_SECONDS,
        viewers_interrupt: bool = False,
    ) -> None:
        self._bridge = bridge
        # The web client: any page showing the session may interrupt its turn, lock or not.
        self._viewers_interrupt = viewers_interrupt
        self._writer = writer
        self._clients = clients
        self._admission = admission
        self._silence_timeout = silence_timeout  # read per stream: a reload applies to new ones
        self._keys_in_hand: set[str] = set()  # idempotency keys of messages being recorded

    async def serve(
        self,
        session: Session,
        client_id: str,
        requests: AsyncIterator[agent_pb2.AgentRequest],
        outbox: asyncio.Queue[list[bytes] | None],
        *,
        end_on_half_close: bool = False,
        via: str = "",
    ) -> None:
        """Handles requests until the client half-closes; errors go to `outbox`. A client that
        has sent a heartbeat and then nothing for the silence timeout is dropped: `outbox`
        gets a CLIENT_SILENT error and then the end of the stream. With `end_on_half_close`
        the stream ends once the client half-closed: each of its requests was handled by then
        (a message recorded with its idempotency key, or refused with an error event). `via`
        says in the audit how the client's answers came ("relay"; direct when empty)."""
        pending = aiter(requests)
        silence = self._silence_timeout()
        heartbeats = False  # armed by the client's first heartbeat (see the module docstring)
        while True:
            try:
                async with asyncio.timeout(silence if heartbeats else None):
                    request = await anext(pending)
            except StopAsyncIteration:
                if end_on_half_close:
                    # After what the requests wrote is committed: the end says "recorded".
                    await self._writer.call(lambda _conn: None)
                    await outbox.put(None)
                return
            except TimeoutError:
                log.info("session %s: client %s went silent; dropped", session.id, client_id)
                _end_stream(outbox, _silent_error(silence))
                return
            heartbeats = heartbeats or request.WhichOneof("request") is None
            self._clients.seen(client_id)
            try:
                await self._handle(session, client_id, request, via)
            except Exception as exc:
                await outbox.put([_transient_error(self._error_for(exc, session, client_id))])

    def _error_for(self, exc: Exception, session: Session, client_id: str) -> BetCodeError:
        if isinstance(exc, BetCodeError):
            return exc
        if (refusal := domain_error(exc)) is not None:
            return refusal
        # A bug must not silently end the handling of this client's requests.
        log.error("session %s: request from %s failed", session.id, client_id, exc_info=exc)
        return BetCodeError(ErrorCode.INTERNAL, f"the daemon failed the request: {exc}")

    async def _handle(
        self, session: Session, client_id: str, request: agent_pb2.AgentRequest, via: str
    ) -> None:
        kind = request.WhichOneof("request")
        if kind is None:  # a heartbeat: the client is still there
            await note_activity(self._bridge, session)
        elif kind == "message":
            await self._user_message(session, client_id, request.message)
        elif kind == "permission":
            permission = request.permission
            answer = ClientAnswer(
                request_id=check_id(permission.request_id, "request_id"),
                decision=permission.decision,
                updated_input=input_object(permission, "updated_input"),
                message=check_text(permission.message, "message"),
                client_id=client_id,
                via=via,
            )
            session.lock.check_input(client_id)
            await self._bridge.answer(session, answer)
        elif kind == "question_response":
            response = request.question_response
            answer = ClientAnswer(
                request_id=check_id(response.question_id, "question_id"),
                answers=check_answers(response.answers, "answers"),
                client_id=client_id,
                via=via,
            )
            session.lock.check_input(client_id)
            await self._bridge.answer(session, answer)
        elif kind == "cancel":
            if self._viewers_interrupt:
                session.lock.check_attached(client_id)
            else:
                session.lock.check_input(client_id)
            self._admission.cancel(session)
            await session.cancel_turn()
            await note_activity(self._bridge, session)
        else:
            raise BetCodeError(ErrorCode.INVALID_REQUEST, f"unexpected request `{kind}` mid-stream")

    async def _user_message(
        self, session: Session, client_id: str, message: agent_pb2.UserMessage
    ) -> None:
        content = check_text(message.content, "the message", required=True)
        key = check_id(message.idempotency_key, "idempotency_key", required=False)
        session.lock.check_input(client_id)
        if not key:
            await self._admission.send(session, client_id, content)
            return
        # The key is recorded with the message (in its transaction): a message already
        # recorded, or being recorded by this daemon now, is not sent again.
        if key in self._keys_in_hand or await self._writer.call(
            lambda c: idempotency.key_recorded(c, key, time.time())
        ):
            log.info("session %s: a message sent again (same idempotency key) skipped", session.id)
            return
        self._keys_in_hand.add(key)
        try:
            await self._admission.send(session, client_id, content, key)
        finally:
            # Once sent, its row is on the writer's queue, committed before any later read.
            self._keys_in_hand.discard(key)


async def note_activity(bridge: PermissionBridge, session: Session) -> None:
    """Client activity pushes back the expiry of the session's pending permissions. A store
    that cannot take the write is logged (health reports it); the request itself goes on."""
    try:
        await bridge.on_session_activity(session)
    except Exception:
        log.exception("session %s: pending permissions not extended", session.id)


def _end_stream(outbox: asyncio.Queue[list[bytes] | None], last: bytes) -> None:
    """Ends the client's stream after `last`, at once: what is still queued is dropped (the
    client replays it from its last sequence when it reconnects), so a full outbox cannot hold
    the end back."""
    while not outbox.empty():
        outbox.get_nowait()
    outbox.put_nowait([last])
    outbox.put_nowait(None)


def _transient_error(error: BetCodeError) -> bytes:
    """An error for one client only: not stored, not sequenced (sequence 0)."""
    event = translate.error_event(error.code.value, error.message, details=error.details)
    return event.SerializeToString()


def _silent_error(silence: float) -> bytes:
    message = (
        f"no heartbeat or request from this client for {silence:g} s: "
        "its stream is closed and its input lock released; reconnect to go on"
    )
    return translate.error_event(ErrorCode.CLIENT_SILENT, message).SerializeToString()
