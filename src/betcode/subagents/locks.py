"""Advisory worktree locks of subagents (SAG-18): optimistic by default, opt-in exclusivity.

Every running or waiting subagent holds its working directory in a mode: NONE (the default)
conflicts only with EXCLUSIVE, SHARED is compatible with NONE and SHARED, EXCLUSIVE conflicts
with everything. A spawn that would conflict waits (`wait_for_lock`) or is refused
(WORKTREE_IN_USE). Locks live in memory: no subagent outlives its daemon, nor its lock.
"""

from __future__ import annotations

import asyncio
import enum


class LockMode(enum.Enum):
    NONE = 0
    SHARED = 1
    EXCLUSIVE = 2


def compatible(held: LockMode, wanted: LockMode) -> bool:
    return LockMode.EXCLUSIVE not in (held, wanted)


class WorktreeLocks:
    def __init__(self) -> None:
        self._held: dict[str, dict[str, LockMode]] = {}  # directory -> holder -> mode
        self._released = asyncio.Event()

    def holders(self, directory: str) -> dict[str, LockMode]:
        return dict(self._held.get(directory, {}))

    def try_acquire(self, directory: str, owner: str, mode: LockMode) -> bool:
        held = self._held.setdefault(directory, {})
        if not all(compatible(other, mode) for who, other in held.items() if who != owner):
            return False
        held[owner] = mode
        return True

    async def acquire(self, directory: str, owner: str, mode: LockMode) -> None:
        """Waits until `mode` is compatible with every other holder of `directory`."""
        while not self.try_acquire(directory, owner, mode):
            self._released.clear()
            await self._released.wait()

    def release(self, owner: str) -> None:
        for directory, held in list(self._held.items()):
            if held.pop(owner, None) is not None and not held:
                del self._held[directory]
        self._released.set()
