"""The turns of the last 10 minutes per session, for the cost rate `betcode top` shows.

Kept in memory from the `turn_finished` reports (a daemon restart starts the window afresh):
a rate over the last minutes needs no stored history, and nothing here ever touches SQLite.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from betcode.observability.hooks import Observer, TurnReport

WINDOW_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class RecentSpend:
    cost_usd: float
    cache_read_tokens: int

    @property
    def cost_per_hour_usd(self) -> float:
        return self.cost_usd * 3600.0 / WINDOW_SECONDS


class RecentTurns(Observer):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._turns: dict[str, deque[tuple[float, TurnReport]]] = {}

    def turn_finished(self, turn: TurnReport) -> None:
        self._turns.setdefault(turn.session_id, deque()).append((self._clock(), turn))

    def spend(self, session_id: str) -> RecentSpend:
        """What the session's turns that ended in the last WINDOW_SECONDS cost."""
        turns = self._turns.get(session_id)
        if not turns:
            return RecentSpend(0.0, 0)
        since = self._clock() - WINDOW_SECONDS
        while turns and turns[0][0] < since:
            turns.popleft()
        if not turns:
            del self._turns[session_id]
            return RecentSpend(0.0, 0)
        return RecentSpend(
            sum(turn.cost_usd for _, turn in turns),
            sum(turn.cache_read_tokens for _, turn in turns),
        )
