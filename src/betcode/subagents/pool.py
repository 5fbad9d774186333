"""The subagent pool (SAG-06): at most `max_concurrent` subagents run at once; the next
`queue_size` wait in order for a place; beyond that a spawn is refused (POOL_EXHAUSTED).

A reload may change both numbers: a larger pool starts waiting subagents at once; a smaller one
lets running ones finish.
"""

from __future__ import annotations

import asyncio
from collections import deque

from betcode.config.settings import SubagentSettings


class PoolExhausted(Exception):
    code = "POOL_EXHAUSTED"


class SubagentPool:
    def __init__(self, settings: SubagentSettings) -> None:
        self.settings = settings
        self.running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._waiting if not f.done())

    def check_room(self, places: int = 1) -> None:
        """Refuses (PoolExhausted) when `places` more subagents could neither run nor wait."""
        free = self.settings.max_concurrent - self.running
        room = max(0, free) + self.settings.queue_size - self.waiting
        if places > room:
            raise PoolExhausted(
                f"the subagent pool is full: {self.running} running (daemon.subagent."
                f"max_concurrent={self.settings.max_concurrent}) and {self.waiting} waiting "
                f"(daemon.subagent.queue_size={self.settings.queue_size})"
            )

    async def acquire(self) -> None:
        if self.running < self.settings.max_concurrent and not self.waiting:
            self.running += 1
            return
        place = asyncio.get_running_loop().create_future()
        self._waiting.append(place)
        try:
            await place
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():
                self.release()  # given a place just as it was cancelled: pass it on
            raise

    def release(self) -> None:
        self.running -= 1
        self._wake()

    def apply_settings(self, settings: SubagentSettings) -> None:
        self.settings = settings
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self.running < self.settings.max_concurrent:
            place = self._waiting.popleft()
            if not place.done():
                self.running += 1
                place.set_result(None)
