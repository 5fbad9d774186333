"""Where a CommandService call works: its session's directory, or without a session_id the
daemon's current directory.

The upstream terminal CLI sends no session_id to CommandService (its ListPathRequest is
`query, max_results`); its daemon answers in one daemon-level current directory that the `cd`
service command changes and `pwd` shows. Ours keeps one too, shared by every client, but only
ever inside a session's tree, so a call without a session reaches nothing that a call for a
session could not:

* unpinned, it is the working directory of the most recently active session: the CLI starts
  (or resumes) its session just before it completes `@paths`, and a daemon started detached or
  as a service has no meaningful directory of its own;
* `cd DIR` pins it to DIR (absolute, or relative to the current directory) once DIR resolves,
  symlinks and `..` included, to an existing folder inside some session's working directory;
  anything else is refused and changes nothing. `cd` alone, or `cd ~`, unpins it;
* a pin lapses when its session is deleted, or its folder is gone or no longer inside that
  session's tree (a symlink changed): the directory follows the latest session again.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

MAX_ARGUMENT_CHARS = 4096
UNPIN_ARGUMENTS = frozenset({"", "~"})


class NoCurrentDirectory(LookupError):
    """A call without session_id while the daemon has no session at all."""

    def __init__(self) -> None:
        super().__init__(
            "this daemon has no current directory yet: without session_id it works in the "
            "directory of the most recently active session, and there is none; start a "
            "session, or send session_id"
        )


class BadDirectory(ValueError):
    """A `cd` argument that names no folder."""


class DirectoryNotAllowed(ValueError):
    """A `cd` to a folder outside every session's working directory."""

    def __init__(self, folder: Path) -> None:
        super().__init__(
            f"{str(folder)!r} is outside the working directory of every session of this "
            "daemon; start a session there to work in it"
        )
        self.folder = folder


@dataclass(frozen=True, slots=True)
class SessionDirectory:
    session_id: str
    directory: str  # the session's working directory, as stored


@dataclass(frozen=True, slots=True)
class Place:
    """Where a call works: a session (whose claude reported the commands and agents) and a
    resolved folder in that session's tree (the files, the project's `.claude/`)."""

    session_id: str
    directory: Path


class SessionDirectories(Protocol):
    """The sessions' working directories, as the daemon has them."""

    async def directory_of(self, session_id: str) -> str | None:
        """The session's working directory; None when there is no such session."""
        ...

    async def most_recent(self) -> SessionDirectory | None:
        """The most recently active session; None when the daemon has none."""
        ...

    async def working_in(self, directory: str) -> SessionDirectory | None:
        """The most recently active session whose working directory is exactly `directory`."""
        ...


def within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def requested_folder(argument: str, current: Path | None) -> Path | None:
    """Where `cd ARGUMENT` asks to go, not yet resolved; None: unpin. Raises BadDirectory for
    an argument that cannot name a folder, NoCurrentDirectory for a relative one with nothing
    to be relative to."""
    if len(argument) > MAX_ARGUMENT_CHARS:
        raise BadDirectory(
            f"the folder is {len(argument)} characters; at most {MAX_ARGUMENT_CHARS}"
        )
    if any(ord(ch) < 32 for ch in argument):
        raise BadDirectory("the folder holds control characters")
    if argument in UNPIN_ARGUMENTS:
        return None
    if argument.startswith("~"):
        raise BadDirectory(
            f"{argument!r}: give an absolute path or one relative to the current directory "
            "(`cd` alone, or `cd ~`, goes back to the latest session's directory)"
        )
    wanted = Path(argument)
    if wanted.is_absolute():
        return wanted
    if current is None:
        raise NoCurrentDirectory()
    return current / wanted


def _resolved(directory: str | Path) -> Path:
    return Path(os.path.realpath(directory))


async def _place(session_id: str, directory: str) -> Place:
    return Place(session_id, await asyncio.to_thread(_resolved, directory))


async def session_place(sessions: SessionDirectories, session_id: str) -> Place | None:
    """Where a call for a session works: its own directory, resolved; None when there is no
    such session."""
    directory = await sessions.directory_of(session_id)
    return None if directory is None else await _place(session_id, directory)


def _still_inside(folder: Path, session_directory: str) -> Path | None:
    """The folder resolved anew, if it still is one inside the session's directory."""
    resolved = _resolved(folder)
    inside = resolved.is_dir() and within(resolved, _resolved(session_directory))
    return resolved if inside else None


class CurrentDirectory:
    """The daemon's current directory (see the module docstring). Blocking file-system checks
    run in a worker thread."""

    def __init__(self, sessions: SessionDirectories) -> None:
        self._sessions = sessions
        self._pinned: Place | None = None

    async def place(self) -> Place:
        """Where a call without session_id works now; raises NoCurrentDirectory."""
        pinned = self._pinned
        if pinned is not None:
            held = await self._pin_held(pinned)
            if held is not None:
                return held
            if self._pinned is pinned:  # unless a `cd` replaced it meanwhile
                self._pinned = None
        latest = await self._sessions.most_recent()
        if latest is None:
            raise NoCurrentDirectory()
        return await _place(latest.session_id, latest.directory)

    async def change(self, argument: str) -> Place:
        """`cd ARGUMENT`: the new current place. Raises BadDirectory, DirectoryNotAllowed or
        NoCurrentDirectory, changing nothing."""
        try:
            current: Path | None = (await self.place()).directory
        except NoCurrentDirectory:
            current = None
        target = requested_folder(argument, current)
        if target is None:
            self._pinned = None
            return await self.place()
        folder = await asyncio.to_thread(_resolved, target)
        holder = await self._holder(folder)
        # Containment first: whether something outside exists is none of the caller's business.
        if holder is None:
            raise DirectoryNotAllowed(folder)
        if not await asyncio.to_thread(folder.is_dir):
            raise BadDirectory(f"{argument!r} is not a folder (in {holder.directory})")
        self._pinned = Place(holder.session_id, folder)
        return self._pinned

    async def _holder(self, folder: Path) -> SessionDirectory | None:
        """The session working in `folder` or nearest above it (`folder` is resolved, so its
        ancestors compare as a session stored its own resolved directory)."""
        for candidate in (folder, *folder.parents):
            found = await self._sessions.working_in(str(candidate))
            if found is not None:
                return found
        return None

    async def _pin_held(self, pinned: Place) -> Place | None:
        """The pinned place as it is now; None once it lapsed (see the module docstring)."""
        directory = await self._sessions.directory_of(pinned.session_id)
        if directory is None:
            return None
        folder = await asyncio.to_thread(_still_inside, pinned.directory, directory)
        return None if folder is None else Place(pinned.session_id, folder)
