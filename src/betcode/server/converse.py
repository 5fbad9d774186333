"""The requests one client sends on its Converse stream, after `start`.

Each is checked, then handed to the session or the permission bridge. A request that fails is
answered with an error event for this client only (sequence 0: neither stored nor shown to
others) and the stream goes on. An AgentRequest with no field set is a heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from betcode.permissions.bridge import PermissionBridge
from betcode.permissions.decisions import ClientAnswer
from betcode.server.connected import ConnectedClients
from betcode.server.errors import BetCodeError, ErrorCode
from betcode.server.validation import (
    check_answers,
    check_id,
    check_text,
    domain_error,
    input_object,
)
from betcode.sessions import translate
from betcode.sessions.session import Session
from betcode.storage import idempotency
from betcode.storage.writer import StoreWriter
from betcode.v1 import agent_pb2

log = logging.getLogger(__name__)


class ConverseRequests:
    def __init__(
        self, bridge: PermissionBridge, writer: StoreWriter, clients: ConnectedClients
    ) -> None:
        self._bridge = bridge
        self._writer = writer
        self._clients = clients

    async def serve(
        self,
        session: Session,
        client_id: str,
        requests: AsyncIterator[agent_pb2.AgentRequest],
        outbox: asyncio.Queue[list[bytes] | None],
    ) -> None:
        """Handles requests until the client half-closes; errors go to `outbox`."""
        async for request in requests:
            self._clients.seen(client_id)
            try:
                await self._handle(session, client_id, request)
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
        self, session: Session, client_id: str, request: agent_pb2.AgentRequest
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
            )
            session.lock.check_input(client_id)
            await self._bridge.answer(session, answer)
        elif kind == "question_response":
            response = request.question_response
            answer = ClientAnswer(
                request_id=check_id(response.question_id, "question_id"),
                answers=check_answers(response.answers, "answers"),
                client_id=client_id,
            )
            session.lock.check_input(client_id)
            await self._bridge.answer(session, answer)
        elif kind == "cancel":
            session.lock.check_input(client_id)
            await session.cancel_turn()
            await note_activity(self._bridge, session)
        else:
            raise BetCodeError(ErrorCode.INVALID_REQUEST, f"unexpected request `{kind}` mid-stream")

    async def _user_message(
        self, session: Session, client_id: str, message: agent_pb2.UserMessage
    ) -> None:
        content = check_text(message.content, "the message", required=True)
        key = check_id(message.idempotency_key, "idempotency_key", required=False)
        # The lock first: a refused message must not use up its idempotency key.
        session.lock.check_input(client_id)
        if key:
            fresh = await self._writer.call(
                lambda c: idempotency.remember_key(c, key, session.id, time.time())
            )
            if not fresh:
                return
        try:
            await session.send_user_message(client_id, content)
        except Exception:
            if key:  # not delivered: a retry with this key must still be applied
                await self._writer.call(lambda c: idempotency.forget_key(c, key))
            raise


async def note_activity(bridge: PermissionBridge, session: Session) -> None:
    """Client activity pushes back the expiry of the session's pending permissions. A store
    that cannot take the write is logged (health reports it); the request itself goes on."""
    try:
        await bridge.on_session_activity(session)
    except Exception:
        log.exception("session %s: pending permissions not extended", session.id)


def _transient_error(error: BetCodeError) -> bytes:
    """An error for one client only: not stored, not sequenced (sequence 0)."""
    event = translate.error_event(error.code.value, error.message, details=error.details)
    return event.SerializeToString()
