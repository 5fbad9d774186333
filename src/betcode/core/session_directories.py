"""The daemon's sessions as the command catalog needs them (their working directories), for
the gRPC CommandService and the web client's `/` and `@` completions alike."""

from __future__ import annotations

from betcode.commands.current_directory import SessionDirectories, SessionDirectory
from betcode.sessions.manager import SessionManager, SessionNotFound
from betcode.storage.sessions import SessionPage


def session_directories(sessions: SessionManager) -> SessionDirectories:
    return _ManagedSessionDirectories(sessions)


class _ManagedSessionDirectories:
    def __init__(self, sessions: SessionManager) -> None:
        self._sessions = sessions

    async def directory_of(self, session_id: str) -> str | None:
        try:
            return (await self._sessions.record(session_id)).working_directory
        except SessionNotFound:
            return None

    async def most_recent(self) -> SessionDirectory | None:
        return _first(await self._sessions.list(limit=1))

    async def working_in(self, directory: str) -> SessionDirectory | None:
        return _first(await self._sessions.list(working_directory=directory, limit=1))


def _first(page: SessionPage) -> SessionDirectory | None:
    return next((SessionDirectory(row.id, row.working_directory) for row in page.sessions), None)
