"""At daemon startup: which holders outlived the previous daemon (holders/<id>/ under the data
dir). A holder that answers on its socket is alive and its session is re-attached. One that
ended its claude after too long without a daemon left claude's output and exit status there
(exit.json): it is started again to replay them (holder.py --replay), and re-attached like a
holder whose claude exited meanwhile. Any other folder is removed, and a claude its holder left
behind is killed (its output, never committed, is lost: the session resumes with --resume as
after any crash); so is a holder that speaks another protocol (left by an older BetCode)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from betcode.claude.holder.client import (
    HolderLink,
    HolderPlace,
    IncompatibleHolder,
    connect,
    kill_group,
    replay,
)
from betcode.claude.holder.holder import EXIT_RECORD
from betcode.claude.process import ClaudeStartError

logger = logging.getLogger(__name__)

# How long a re-attaching daemon waits for a holder's HELLO. A dead holder refuses at once; a
# live one serves one daemon at a time, so it greets only once done with the killed daemon's
# connection, which on a loaded machine can take longer than the 5 s this was; one that had
# not greeted by then was taken for gone, its claude killed and its session lost. Only a live
# holder that is stuck waits the whole of it.
CONNECT_TIMEOUT_SECONDS = 30.0


@dataclass(slots=True)
class FoundHolder:
    session_id: str
    started_at: float  # when the holder started claude (wall clock)
    link: HolderLink
    directory: Path

    def abandon(self) -> None:
        """Its session is gone: kill claude and the holder, remove its folder."""
        if not self.link.claude_exited:
            kill_group(self.link.claude_pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.link.holder_pid, signal.SIGKILL)
        self.link.writer.close()
        shutil.rmtree(self.directory, ignore_errors=True)


async def find_holders(place: HolderPlace) -> list[FoundHolder]:
    """The live holders under `place.root` (replaying those that left); the rest is cleaned
    up."""
    directories = await asyncio.to_thread(_directories, place.root)
    found: list[FoundHolder] = []
    for directory in directories:
        facts = await asyncio.to_thread(_facts, directory)
        link = await _reach(directory, facts, place)
        if link is None:
            continue
        if facts is None:
            logger.warning("holder %s has no holder.json; stopping it", directory.name)
            await asyncio.to_thread(FoundHolder("", 0.0, link, directory).abandon)
            continue
        session_id = str(facts["session_id"])
        logger.info(
            "holder %s (pid %d) of session %s is alive: claude pid %d%s",
            link.holder_id,
            link.holder_pid,
            session_id,
            link.claude_pid,
            " (exited)" if link.claude_exited else "",
        )
        found.append(FoundHolder(session_id, float(facts["started_at"]), link, directory))
    return found


async def _reach(
    directory: Path, facts: dict[str, Any] | None, place: HolderPlace
) -> HolderLink | None:
    """A link to the holder in `directory`, started again to replay what it left if it ended
    its claude; None (its folder cleaned up) when there is none to have."""
    try:
        return await connect(directory, CONNECT_TIMEOUT_SECONDS)
    except IncompatibleHolder as error:
        logger.warning("%s; stopping it and its claude", error)
        await asyncio.to_thread(_collect, directory, facts, holder_too=True)
        return None
    except (OSError, TimeoutError) as error:
        gone: Exception = error
    if facts is not None and (directory / EXIT_RECORD).exists():
        try:
            return await replay(directory, place)
        except (OSError, TimeoutError, ClaudeStartError) as error:
            gone = error
    logger.warning("holder %s is gone (%s); removing it", directory.name, gone)
    await asyncio.to_thread(_collect, directory, facts, holder_too=False)
    return None


def _directories(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(entry for entry in root.iterdir() if entry.is_dir())


def _facts(directory: Path) -> dict[str, Any] | None:
    try:
        facts = json.loads((directory / "holder.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return facts if isinstance(facts, dict) else None


def _collect(directory: Path, facts: dict[str, Any] | None, *, holder_too: bool) -> None:
    claude_pid = facts.get("claude_pid") if facts else None
    # A holder that left exit.json ended its claude, maybe long ago: that pid may be another's.
    ended = (directory / EXIT_RECORD).exists()
    if not ended and isinstance(claude_pid, int) and _leads_its_group(claude_pid):
        logger.warning("killing claude pid %d, left behind by its holder", claude_pid)
        kill_group(claude_pid)
    holder_pid = facts.get("holder_pid") if facts else None
    if holder_too and isinstance(holder_pid, int):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(holder_pid, signal.SIGKILL)
    shutil.rmtree(directory, ignore_errors=True)


def _leads_its_group(pid: int) -> bool:
    """Still a process group leader: what claude is (a reused pid rarely is)."""
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
