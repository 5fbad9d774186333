"""The registry of sessions: create, load on demand (seeding seqs from SQLite), list, delete;
it also starts each session's input-lock idle timer and applies reloaded settings to them all."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from betcode.claude.backoff import SupervisorPolicy
from betcode.sessions import translate
from betcode.sessions.context import SessionContext, SessionSettings
from betcode.sessions.session import Session
from betcode.storage import sessions as session_rows
from betcode.v1 import agent_pb2

MAX_SESSION_ID_CHARS = 128


class SessionNotFound(LookupError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session with id {session_id!r}")
        self.session_id = session_id


class InvalidSessionRequest(ValueError):
    """A create/attach request that can never succeed as given."""


def validate_session_id(session_id: str) -> None:
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidSessionRequest(
            f"session_id is {len(session_id)} characters; at most {MAX_SESSION_ID_CHARS} allowed"
        )
    if not session_id.isprintable() or any(ch.isspace() for ch in session_id):
        raise InvalidSessionRequest("session_id must be printable and contain no whitespace")


def validate_working_directory(path: str) -> str:
    if not path:
        raise InvalidSessionRequest("working_directory is required to start a session")
    resolved = Path(path).expanduser()
    if not resolved.is_absolute():
        raise InvalidSessionRequest(f"working_directory must be absolute, got {path!r}")
    if not resolved.is_dir():
        raise InvalidSessionRequest(f"working_directory {path!r} does not exist or is not a folder")
    if not os.access(resolved, os.R_OK | os.X_OK):
        raise InvalidSessionRequest(f"working_directory {path!r} is not readable")
    return str(resolved.resolve())


class SessionManager:
    def __init__(self, context: SessionContext) -> None:
        self._ctx = context
        self._sessions: dict[str, Session] = {}
        self._loading = asyncio.Lock()

    @property
    def live(self) -> list[Session]:
        return list(self._sessions.values())

    async def create(
        self,
        *,
        working_directory: str,
        model: str = "",
        worktree_id: str | None = None,
        allowed_tools: Sequence[str] = (),
        name: str = "",
    ) -> Session:
        cwd = validate_working_directory(working_directory)
        session_id = str(uuid.uuid4())
        record = await self._ctx.writer.call(
            lambda c: session_rows.create_session(
                c,
                session_id=session_id,
                model=model,
                working_directory=cwd,
                now=time.time(),
                worktree_id=worktree_id,
                name=name,
            )
        )
        session = Session(record, self._ctx, line_seq=0, event_seq=0, allowed_tools=allowed_tools)
        self._register(session)
        # Clients learn the new session's id from this first event.
        session.emit(
            [
                agent_pb2.AgentEvent(
                    session_info=agent_pb2.SessionInfo(
                        session_id=session_id,
                        model=model,
                        working_directory=cwd,
                        worktree_id=worktree_id or "",
                    )
                )
            ]
        )
        return session

    async def get(self, session_id: str) -> Session:
        validate_session_id(session_id)
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        async with self._loading:
            session = self._sessions.get(session_id)
            if session is not None:
                return session
            record = await self._ctx.reader.read(lambda c: session_rows.get_session(c, session_id))
            if record is None:
                raise SessionNotFound(session_id)
            line_seq, event_seq = await self._ctx.reader.max_sequences(session_id)
            session = Session(record, self._ctx, line_seq=line_seq, event_seq=event_seq)
            self._register(session)
            return session

    def _register(self, session: Session) -> None:
        def announce(holder: str) -> None:
            session.emit([translate.input_lock_event(holder)])

        session.lock.watch_idle(announce)
        self._sessions[session.id] = session

    def apply_settings(self, settings: SessionSettings, policy: SupervisorPolicy) -> None:
        """A settings reload: sessions opened from now on use `settings` and `policy`; live ones
        get the new input-lock timings at once and `policy` for their watchdog, idle reaping and
        next restarts (their crash budget, counted since they opened, stays)."""
        self._ctx.settings = settings
        self._ctx.process_policy = policy
        for session in self._sessions.values():
            session.lock.retime(settings.lock_transfer_seconds, settings.lock_idle_seconds)
            session.supervisor.policy = policy

    async def record(self, session_id: str) -> session_rows.SessionRecord:
        validate_session_id(session_id)
        record = await self._ctx.reader.read(lambda c: session_rows.get_session(c, session_id))
        if record is None:
            raise SessionNotFound(session_id)
        return record

    async def list(
        self, *, working_directory: str = "", worktree_id: str = "", limit: int = 0, offset: int = 0
    ) -> session_rows.SessionPage:
        return await self._ctx.reader.read(
            lambda c: session_rows.list_sessions(
                c,
                working_directory=working_directory or None,
                worktree_id=worktree_id or None,
                limit=limit or None,
                offset=offset,
            )
        )

    async def rename(self, session_id: str, name: str) -> None:
        validate_session_id(session_id)
        if not await self._ctx.writer.call(
            lambda c: session_rows.set_name(c, session_id, name, time.time())
        ):
            raise SessionNotFound(session_id)

    async def delete(self, session_id: str) -> bool:
        validate_session_id(session_id)
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.lock.close()
            await session.close()
        return await self._ctx.writer.call(lambda c: session_rows.delete_session(c, session_id))

    async def shutdown(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.lock.close()
        await asyncio.gather(*(session.close() for session in sessions), return_exceptions=True)
