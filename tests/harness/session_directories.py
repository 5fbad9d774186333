"""The sessions' working directories without a daemon, for CommandService and its current
directory: the session last made active is the most recently active one."""

from __future__ import annotations

from pathlib import Path

from betcode.commands.current_directory import SessionDirectory


class SessionsInMemory:
    """SessionDirectories over a list, oldest activity first."""

    def __init__(self) -> None:
        self._by_activity: list[SessionDirectory] = []

    def active(self, session_id: str, directory: Path | None = None) -> None:
        """The session (new, or known when `directory` is None) was just active."""
        known = {entry.session_id: entry for entry in self._by_activity}
        entry = (
            known[session_id] if directory is None else SessionDirectory(session_id, str(directory))
        )
        self.delete(session_id)
        self._by_activity.append(entry)

    def delete(self, session_id: str) -> None:
        self._by_activity = [e for e in self._by_activity if e.session_id != session_id]

    async def directory_of(self, session_id: str) -> str | None:
        found = [e.directory for e in self._by_activity if e.session_id == session_id]
        return found[0] if found else None

    async def most_recent(self) -> SessionDirectory | None:
        return self._by_activity[-1] if self._by_activity else None

    async def working_in(self, directory: str) -> SessionDirectory | None:
        found = [e for e in self._by_activity if e.directory == directory]
        return found[-1] if found else None
