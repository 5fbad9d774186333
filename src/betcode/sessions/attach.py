"""Attach = replay from SQLite, then live, with no gap and no duplicate at the switch.

The live queue is registered BEFORE the first SQLite read. Events are published only after
their commit, so every event is either already readable from SQLite or will arrive in the
queue; frames with ``seq <= last delivered`` are dropped at the switch. A subscriber that
overflows (lagging) goes back to SQLite from its last delivered seq, the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from betcode.sessions.fanout import Frame, Subscriber

ReadPage = Callable[[int, int], Awaitable[list[Frame]]]
"""(after_seq, limit) -> committed frames with seq > after_seq, ascending."""

REPLAY_PAGE_SIZE = 1000


async def replay_then_live(
    subscriber: Subscriber,
    read_page: ReadPage,
    after_seq: int,
    *,
    max_count: int = 256,
    max_bytes: int = 4 * 1024 * 1024,
    on_caught_up: Callable[[int], Awaitable[list[Frame]]] | None = None,
    mark_caught_up: bool = False,
    follow: bool = True,
) -> AsyncIterator[list[Frame]]:
    """Yields batches of frames in seq order until the subscriber is closed, or, without
    ``follow``, until the replay reached the live edge (what SQLite held when it got there).

    ``on_caught_up(last_seq)`` runs once, after the first replay reaches the live edge; the
    frames it returns (e.g. still-pending permission requests flagged as replays) are yielded
    as they are, outside the seq ordering. With ``mark_caught_up`` an empty batch follows, so
    a client that only wants the history knows where it ends.
    """
    last = after_seq
    async for batch in _replay(read_page, last, max_count, max_bytes):
        last = batch[-1][0]
        yield batch
    if on_caught_up is not None:
        extra = await on_caught_up(last)
        if extra:
            yield extra
    if mark_caught_up:
        yield []
    while follow:
        if subscriber.lagging:
            subscriber.resume_after_lag()
            async for batch in _replay(read_page, last, max_count, max_bytes):
                last = batch[-1][0]
                yield batch
            continue
        frames = subscriber.take(max_count, max_bytes)
        if frames:
            fresh = [frame for frame in frames if frame[0] > last]
            if fresh:
                last = fresh[-1][0]
                yield fresh
            continue
        if subscriber.closed:
            return
        await subscriber.wait()


async def _replay(
    read_page: ReadPage, after_seq: int, max_count: int, max_bytes: int
) -> AsyncIterator[list[Frame]]:
    """Every committed frame after ``after_seq``, page by page, in capped batches."""
    last = after_seq
    while True:
        page = await read_page(last, REPLAY_PAGE_SIZE)
        if not page:
            return
        batch: list[Frame] = []
        size = 0
        for frame in page:
            if batch and (len(batch) >= max_count or size + len(frame[1]) > max_bytes):
                yield batch
                batch, size = [], 0
            batch.append(frame)
            size += len(frame[1])
        yield batch
        last = page[-1][0]
