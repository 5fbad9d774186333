"""betcode.v1.HistoryService: full-text search over the stored messages (`storage.search`),
read on the store's reader pool: it never touches a live session, its input lock or claude."""

from __future__ import annotations

import grpc

from betcode.core import convert
from betcode.core.errors import BetCodeError, ErrorCode
from betcode.core.validation import check_id, check_text, domain_error, invalid
from betcode.server.errors import translates_errors
from betcode.storage import sessions as session_rows
from betcode.storage.reader import StoreReader
from betcode.storage.search import match_expression, search_messages
from betcode.v1 import history_pb2

DEFAULT_HITS = 20
MAX_HITS = 500

serves = translates_errors(domain_error)


class HistoryService:
    def __init__(self, reader: StoreReader) -> None:
        self._reader = reader

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
