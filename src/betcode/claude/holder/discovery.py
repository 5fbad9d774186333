"""At daemon startup: which holders outlived the previous daemon (holders/<id>/ under the data
dir). A holder that answers on its socket is alive and its session is re-attached; the folder
of one that does not is removed, and a claude it left behind is killed (its output, never
committed, is lost: the session resumes with --resume as after any crash)."""

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

from betcode.claude.holder.client import HolderLink, connect, kill_group

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 5.0


@dataclass(slots=True)
class FoundHolder:
    session_id: str
    started_at: float  # when the holder started claude (wall clock)
    link: HolderLink
    directory: Path

    def abandon(self) -> None:
        """Its session is gone: kill claude and the holder, remove its folder."""
        kill_group(self.link.claude_pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.link.holder_pid, signal.SIGKILL)
        self.link.writer.close()
        shutil.rmtree(self.directory, ignore_errors=True)


async def find_holders(root: Path) -> list[FoundHolder]:
    """The live holders under `root`; the dead ones' folders are cleaned up."""
    directories = await asyncio.to_thread(_directories, root)
    found: list[FoundHolder] = []
    for directory in directories:
        facts = await asyncio.to_thread(_facts, directory)
        try:
            link = await connect(directory, CONNECT_TIMEOUT_SECONDS)
        except (OSError, TimeoutError) as error:
            logger.warning("holder %s is gone (%s); removing it", directory.name, error)
            await asyncio.to_thread(_collect_dead, directory, facts)
            continue
        if facts is None:
            logger.warning("holder %s has no holder.json; stopping it", directory.name)
            await asyncio.to_thread(FoundHolder("", 0.0, link, directory).abandon)
            continue
        session_id = str(facts["session_id"])
        logger.info(
            "holder %s (pid %d) of session %s is alive: claude pid %d",
            link.holder_id,
            link.holder_pid,
            session_id,
            link.claude_pid,
        )
        found.append(FoundHolder(session_id, float(facts["started_at"]), link, directory))
    return found


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


def _collect_dead(directory: Path, facts: dict[str, Any] | None) -> None:
    claude_pid = facts.get("claude_pid") if facts else None
    if isinstance(claude_pid, int) and _leads_its_group(claude_pid):
        logger.warning("killing claude pid %d, left behind by its dead holder", claude_pid)
        kill_group(claude_pid)
    shutil.rmtree(directory, ignore_errors=True)


def _leads_its_group(pid: int) -> bool:
    """Still a process group leader: what claude is (a reused pid rarely is)."""
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
