"""Each session's claude memory in view, and `daemon.limits.session_rss_mb` (docs/LIMITS.md).

Every `CHECK_INTERVAL_SECONDS` the resident memory of each live session's claude is measured:
its process and every process below it (tools, MCP servers), read from /proc in one pass for
all sessions, off the event loop (Linux; elsewhere nothing is measured). `sessions show`,
`betcode top`, the health details and the metrics show it. Above the cap, an idle session's
claude (no turn, no request waiting) is stopped as the idle reaper stops it: the next message
starts it again with `--resume`, the conversation intact. A session in a turn is flagged,
never stopped; its clients are told when it is stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from betcode.config.settings import LimitSettings
from betcode.sessions import translate
from betcode.sessions.session import Session
from betcode.v1 import common_pb2

log = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 10.0
MIB = 1024 * 1024
PROC = Path("/proc")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_tree_rss(root: int, proc: Path = PROC) -> int:
    """Resident bytes of process `root` and all its descendants (0 when it is gone)."""
    return process_trees_rss([root], proc)[0]


def process_trees_rss(roots: Sequence[int], proc: Path = PROC) -> list[int]:
    """`process_tree_rss` of each root, from one pass over /proc."""
    children = _children(proc)
    return [_tree_rss(proc, children, root) for root in roots]


def _children(proc: Path) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    try:
        entries = list(os.scandir(proc))
    except OSError:
        return children
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (proc / entry.name / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # The command name (in parentheses) may hold spaces: fields after it are plain.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _tree_rss(proc: Path, children: dict[int, list[int]], root: int) -> int:
    total, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _rss(proc, pid)
        stack.extend(children.get(pid, ()))
    return total


def _rss(proc: Path, pid: int) -> int:
    try:
        return int((proc / str(pid) / "statm").read_text().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


@dataclass(frozen=True, slots=True)
class Measured:
    rss_bytes: int
    over_limit: bool  # above daemon.limits.session_rss_mb (stopped when idle, else flagged)


class MemoryWatch:
    def __init__(
        self,
        live: Callable[[], list[Session]],
        is_waiting: Callable[[str], bool],
        settings: LimitSettings,
        measure: Callable[[Sequence[int]], list[int]] = process_trees_rss,
    ) -> None:
        self._live = live
        self._is_waiting = is_waiting  # a permission request waits on the session's claude
        self.settings = settings
        self._measure = measure
        self._measured: dict[str, Measured] = {}
        self.stopped = 0  # claude processes stopped for their memory since the start

    def apply_settings(self, settings: LimitSettings) -> None:
        self.settings = settings

    def of(self, session_id: str) -> Measured | None:
        """The last measure of the session's claude; None when it has no claude running."""
        return self._measured.get(session_id)

    @property
    def measured(self) -> dict[str, Measured]:
        return dict(self._measured)

    async def run(self, interval: float = CHECK_INTERVAL_SECONDS) -> None:
        """Check every `interval` seconds until cancelled."""
        while True:
            try:
                await self.check_once()
            except Exception:
                log.exception("the memory check failed; trying again in %g s", interval)
            await asyncio.sleep(interval)

    async def check_once(self) -> None:
        running = [(s, s.supervisor.pid) for s in self._live() if s.supervisor.pid is not None]
        pids = [pid for _, pid in running if pid is not None]
        sizes = await asyncio.to_thread(self._measure, pids) if pids else []
        limit = self.settings.session_rss_mb * MIB
        measured: dict[str, Measured] = {}
        for (session, _pid), size in zip(running, sizes, strict=True):
            over = bool(limit) and size > limit
            was_over = session.id in self._measured and self._measured[session.id].over_limit
            if over and await self._over_limit(session, size, flagged=was_over):
                continue  # stopped: nothing runs to measure
            measured[session.id] = Measured(size, over)
        self._measured = measured

    async def _over_limit(self, session: Session, size: int, *, flagged: bool) -> bool:
        """Stop the session's claude if it is idle (True); flag it if busy."""
        limit_mb = self.settings.session_rss_mb
        what = (
            f"claude uses {size / MIB:.0f} MB, above daemon.limits.session_rss_mb ({limit_mb} MB)"
        )
        if session.turn_active or self._is_waiting(session.id):
            if not flagged:  # said once, not at every check; show, top and health flag it
                log.warning("session %s: %s; it is busy, so it runs on", session.id, what)
            return False
        log.warning("session %s: %s; stopping it (the next message resumes it)", session.id, what)
        await session.supervisor.stop()
        self.stopped += 1
        session.emit(
            [
                translate.status_event(
                    common_pb2.AgentStatus.AGENT_STATUS_IDLE,
                    f"{what}: stopped while idle; the next message resumes the conversation",
                )
            ]
        )
        return True
