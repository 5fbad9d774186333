"""Dedup and rate limits of attention notifications (TOP-06), as every sender of them counts:
the relay for its webhook (relay/notifications.py, its counts shared on the NATS cluster by
relay/notify_limits.py) and the daemon for Web Push (betcode.push). A notification id is sent
at most once; at most 5 per hour per session and 20 per day per user.

A limit is a sliding window per key: the times of what was sent in the last `seconds`, at most
`limit` of them."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

log = logging.getLogger(__name__)

PER_SESSION_PER_HOUR = 5
PER_USER_PER_DAY = 20
REMEMBERED_IDS = 10_000  # in memory

Window = tuple[str, float, int]  # key, seconds, limit


class NotifyLimits(Protocol):
    async def first_time(self, key: str) -> bool:
        """True once per key: the notification was not seen before."""
        ...

    async def admit(self, windows: Sequence[Window]) -> bool:
        """Counts one notification in every window if each has room; False (counting nothing)
        when one is full."""
        ...


async def admit_notification(
    limits: NotifyLimits,
    notification_key: str,
    session_key: str,
    user_key: str,
    *,
    per_session_per_hour: int = PER_SESSION_PER_HOUR,
    per_user_per_day: int = PER_USER_PER_DAY,
) -> bool:
    """Whether to send this notification: False for one seen before or one over a limit."""
    if not await limits.first_time(notification_key):
        return False
    windows = [
        (f"session:{session_key}", 3600.0, per_session_per_hour),
        (f"user:{user_key}", 86400.0, per_user_per_day),
    ]
    if not await limits.admit(windows):
        log.info("notification %s for %s rate-limited", notification_key, session_key)
        return False
    return True


class MemoryLimits:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._events: dict[str, collections.deque[float]] = collections.defaultdict(
            collections.deque
        )

    async def first_time(self, key: str) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > REMEMBERED_IDS:
            self._seen.popitem(last=False)
        return True

    async def admit(self, windows: Sequence[Window]) -> bool:
        now = self._clock()
        for key, seconds, limit in windows:
            events = self._events[key]
            while events and events[0] <= now - seconds:
                events.popleft()
            if len(events) >= limit:
                return False
        for key, _seconds, _limit in windows:
            self._events[key].append(now)
        return True
