"""Where each session runs, as the commands that list many sessions' things say it: its name,
and its worktree with the branch, or its directory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from betcode.cli.connection import DaemonClient
from betcode.cli.ids import SESSIONS, WORKTREES, short_id


@dataclass(frozen=True)
class Place:
    session_id: str
    name: str
    directory: str
    worktree: str = ""  # the worktree's name, if the session runs in one
    branch: str = ""

    def describe(self) -> str:
        named = f"session {short_id(self.session_id)}" + (f" ({self.name})" if self.name else "")
        if self.worktree:
            return f"{named} in worktree {self.worktree} (branch {self.branch})"
        return f"{named} in {self.directory}"


async def session_places(client: DaemonClient) -> Mapping[str, Place]:
    """Every session's place, by session id."""
    worktrees = {w.id: w for w in await WORKTREES.fetch(client)}
    places = {}
    for session in await SESSIONS.fetch(client):
        worktree = worktrees.get(session.worktree_id)
        places[session.id] = Place(
            session.id,
            session.name,
            session.working_directory,
            worktree.name if worktree else "",
            worktree.branch if worktree else "",
        )
    return places
