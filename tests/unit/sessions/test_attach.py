from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from betcode.sessions.attach import replay_then_live
from betcode.sessions.fanout import FanoutHub, Frame


class CommittedLog:
    """Stands for SQLite: frames become readable when 'committed', then get published."""

    def __init__(self, hub: FanoutHub) -> None:
        self.hub = hub
        self.rows: list[Frame] = []
        self.reads = 0

    def commit(self, first: int, count: int) -> None:
        frames = [(seq, f"e{seq}".encode()) for seq in range(first, first + count)]
        self.rows.extend(frames)
        self.hub.publish(frames)

    async def read_page(self, after: int, limit: int) -> list[Frame]:
        self.reads += 1
        await asyncio.sleep(0)
        return [f for f in self.rows if f[0] > after][:limit]


async def collect(gen: AsyncIterator[list[Frame]], until_seq: int) -> list[int]:
    seen: list[int] = []
    async for batch in gen:
        seen.extend(seq for seq, _ in batch)
        if seen and seen[-1] >= until_seq:
            break
    return seen


async def test_history_then_live_without_gap_or_duplicate() -> None:
    hub = FanoutHub()
    log = CommittedLog(hub)
    log.commit(1, 2500)
    sub = hub.subscribe("c", capacity=10_000)
    # Commits that land between subscribing and reading SQLite arrive twice: in SQLite and in
    # the queue. The attach must deliver them once.
    log.commit(2501, 10)
    gen = replay_then_live(sub, log.read_page, 0)
    task = asyncio.create_task(collect(gen, 2600))
    await asyncio.sleep(0.01)
    log.commit(2511, 90)
    seen = await asyncio.wait_for(task, 5)
    assert seen == list(range(1, 2601))


async def test_resume_from_a_sequence() -> None:
    hub = FanoutHub()
    log = CommittedLog(hub)
    log.commit(1, 50)
    sub = hub.subscribe("c", capacity=100)
    task = asyncio.create_task(collect(replay_then_live(sub, log.read_page, 40), 55))
    await asyncio.sleep(0.01)
    log.commit(51, 5)
    assert await asyncio.wait_for(task, 5) == list(range(41, 56))


async def test_lagging_subscriber_catches_up_from_storage() -> None:
    hub = FanoutHub()
    log = CommittedLog(hub)
    sub = hub.subscribe("slow", capacity=8)
    gen = replay_then_live(sub, log.read_page, 0)
    task = asyncio.create_task(collect(gen, 200))
    await asyncio.sleep(0.01)
    for start in range(1, 201, 20):  # bursts far larger than the queue
        log.commit(start, 20)
    seen = await asyncio.wait_for(task, 5)
    assert seen == list(range(1, 201))
    assert sub.lag_count >= 1


async def test_caught_up_hook_frames_come_after_history() -> None:
    hub = FanoutHub()
    log = CommittedLog(hub)
    log.commit(1, 3)
    sub = hub.subscribe("c", capacity=100)
    calls: list[int] = []

    async def pending(last: int) -> list[Frame]:
        calls.append(last)
        return [(2, b"pending-again")]

    gen = replay_then_live(sub, log.read_page, 0, on_caught_up=pending)
    batches = [await anext(gen), await anext(gen)]
    assert [seq for seq, _ in batches[0]] == [1, 2, 3]
    assert batches[1] == [(2, b"pending-again")]
    assert calls == [3]


async def test_batches_are_capped_by_count_and_bytes() -> None:
    hub = FanoutHub()
    log = CommittedLog(hub)
    log.commit(1, 10)
    sub = hub.subscribe("c", capacity=100)
    gen = replay_then_live(sub, log.read_page, 0, max_count=4, max_bytes=1 << 20)
    sizes = [len(await anext(gen)) for _ in range(3)]
    assert sizes == [4, 4, 2]


async def test_closed_subscriber_ends_the_stream() -> None:
    hub = FanoutHub()
    log = CommittedLog(hub)
    sub = hub.subscribe("c", capacity=100)
    gen = replay_then_live(sub, log.read_page, 0)
    task = asyncio.create_task(collect(gen, 10**9))
    await asyncio.sleep(0.01)
    log.commit(1, 1)
    await asyncio.sleep(0.01)
    hub.unsubscribe(sub)
    assert await asyncio.wait_for(task, 5) == [1]


async def test_without_follow_the_stream_ends_after_the_stored_frames() -> None:
    hub = FanoutHub()
    log = CommittedLog(hub)
    log.commit(1, 5)
    sub = hub.subscribe("c", capacity=100)

    async def pending(last: int) -> list[Frame]:
        return [(2, b"pending-again")]

    gen = replay_then_live(sub, log.read_page, 2, on_caught_up=pending, follow=False)
    batches = [batch async for batch in gen]  # ends by itself
    assert batches == [[(seq, f"e{seq}".encode()) for seq in (3, 4, 5)], [(2, b"pending-again")]]
