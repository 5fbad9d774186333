"""betcode.v1.HistoryService: full-text search over the stored messages (`storage.search`),
read on the store's reader pool: it never touches a live session, its input lock or claude."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from betcode.core import convert
from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.validation import check_id, check_text, domain_error, invalid
from betcode.server.agent_service import client_id_of
from betcode.server.errors import translates_errors
from betcode.sessions import adoption
from betcode.sessions.manager import SessionManager
from betcode.storage import sessions as session_rows
from betcode.storage.reader import StoreReader
from betcode.storage.search import match_expression, search_messages
from betcode.v1 import history_pb2

DEFAULT_HITS = 20
MAX_HITS = 500

serves = translates_errors(domain_error)


def adoption_error(exc: Exception) -> BetCodeError | None:
    if isinstance(exc, adoption.ConversationNotFound):
        return BetCodeError(ErrorCode.NOT_FOUND, str(exc))
    if isinstance(exc, adoption.AlreadyAdopted):
        return BetCodeError(ErrorCode.ALREADY_EXISTS, str(exc), {"session_id": exc.session_id})
    return domain_error(exc)


adopts = translates_errors(adoption_error)


class HistoryService:
    def __init__(self, reader: StoreReader, sessions: SessionManager, claude_dir: Path) -> None:
        self._reader = reader
        self._sessions = sessions
        self._claude_dir = claude_dir

    @serves
    async def SearchMessages(
        self, request: history_pb2.SearchMessagesRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.SearchMessagesResponse:
        text = check_text(request.query, "query")
        if not match_expression(text):
            raise invalid("query has no word to search for")
        session_id = check_id(request.session_id, "session_id", required=False)
        limit = min(request.limit or DEFAULT_HITS, MAX_HITS)

        if session_id and not await self._reader.read(
            lambda c: session_rows.get_session(c, session_id) is not None
        ):
            raise BetCodeError(
                ErrorCode.SESSION_NOT_FOUND,
                f"no session {session_id!r}",
                {"session_id": session_id},
            )
        hits = await self._reader.read(
            lambda c: search_messages(c, text, limit=limit, session_id=session_id)
        )
        return history_pb2.SearchMessagesResponse(
            hits=[
                history_pb2.MessageHit(
                    session_id=hit.session_id,
                    session_name=hit.session_name,
                    working_directory=hit.working_directory,
                    sequence=hit.sequence,
                    role=hit.role,
                    created_at=convert.timestamp(hit.created_at),
                    snippet=hit.snippet,
                )
                for hit in hits
            ]
        )

    @adopts
    async def ListClaudeConversations(
        self,
        request: history_pb2.ListClaudeConversationsRequest,
        context: grpc.aio.ServicerContext,
    ) -> history_pb2.ListClaudeConversationsResponse:
        directory = check_text(request.working_directory, "working_directory", required=True)
        found = await asyncio.to_thread(adoption.conversations, self._claude_dir, directory)
        adopted = {
            record.claude_session_id: record.id
            for record in (await self._sessions.list()).sessions
            if record.claude_session_id
        }
        return history_pb2.ListClaudeConversationsResponse(
            conversations=[
                history_pb2.ClaudeConversation(
                    claude_session_id=c.claude_session_id,
                    modified_at=convert.timestamp(c.modified),
                    message_count=c.messages,
                    first_prompt=c.first_prompt,
                    session_id=adopted.get(c.claude_session_id, ""),
                )
                for c in found
            ]
        )

    @adopts
    async def AdoptConversation(
        self, request: history_pb2.AdoptConversationRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.AdoptConversationResponse:
        session, imported = await adoption.adopt(
            self._sessions,
            self._claude_dir,
            check_id(request.claude_session_id, "claude_session_id"),
            check_text(request.working_directory, "working_directory", required=True),
            client_id_of(context),
        )
        return history_pb2.AdoptConversationResponse(
            session_id=session.id, messages_imported=imported
        )
