"""Fan-out of committed, already-serialized events to the clients of one session.

Frames are ``(event_seq, bytes)``: the AgentEvent is serialized once and the same bytes object is
shared by every client queue. Each queue is bounded; a client that falls more than ``capacity``
frames behind is marked *lagging* and its queue is dropped — it then catches up from SQLite
(see ``sessions.attach``). Publishing never waits, so a slow client never slows claude down.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

Frame = tuple[int, bytes]


class Subscriber:
    """One client's bounded live queue, read by one consumer."""

    __slots__ = (
        "_frames",
        "_loop",
        "_waiter",
        "capacity",
        "client_id",
        "closed",
        "lag_count",
        "lagging",
    )

    def __init__(self, client_id: str, capacity: int) -> None:
        self.client_id = client_id
        self.capacity = capacity
        self.lagging = False
        self.lag_count = 0
        self.closed = False
        self._frames: deque[Frame] = deque()
        # A bare future, not an asyncio.Event: an Event looks the running loop up for every
        # wait, which is a getpid() system call, once per delivered event and client.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future[None] | None = None

    def offer(self, frames: Sequence[Frame]) -> None:
        if self.lagging or self.closed:
            return
        if len(self._frames) + len(frames) > self.capacity:
            # Dropping the whole queue (not just the overflow) keeps the rule simple: a lagging
            # client always resumes from its last delivered seq out of SQLite.
            self._frames.clear()
            self.lagging = True
            self.lag_count += 1
        else:
            self._frames.extend(frames)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self, max_count: int, max_bytes: int) -> list[Frame]:
        """Removes up to ``max_count`` frames / about ``max_bytes`` bytes (always at least one)."""
        taken: list[Frame] = []
        size = 0
        frames = self._frames
        while frames and len(taken) < max_count:
            frame = frames[0]
            if taken and size + len(frame[1]) > max_bytes:
                break
            frames.popleft()
            taken.append(frame)
            size += len(frame[1])
        return taken

    def resume_after_lag(self) -> None:
        """Called by the reader just before it re-reads SQLite: live frames queue up again."""
        self.lagging = False
        self._frames.clear()

    async def wait(self) -> None:
        """Returns once frames are queued, the queue overflowed or the subscriber closed."""
        if self._frames or self.lagging or self.closed:
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def __len__(self) -> int:
        return len(self._frames)


class FanoutHub:
    """The set of live subscribers of one session."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, client_id: str, capacity: int) -> Subscriber:
        subscriber = Subscriber(client_id, capacity)
        self._subscribers.append(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        subscriber.close()
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    def publish(self, frames: Sequence[Frame]) -> None:
        if frames:
            for subscriber in self._subscribers:
                subscriber.offer(frames)

    def close_all(self) -> None:
        for subscriber in self._subscribers:
            subscriber.close()
        self._subscribers.clear()

    def __len__(self) -> int:
        return len(self._subscribers)

    def lagging(self) -> int:
        """Subscribers catching up from SQLite after their queue overflowed."""
        return sum(1 for subscriber in list(self._subscribers) if subscriber.lagging)

    def fullest(self) -> float:
        """How full the fullest subscriber queue is (0 to 1)."""
        return max((len(s) / s.capacity for s in list(self._subscribers)), default=0.0)
