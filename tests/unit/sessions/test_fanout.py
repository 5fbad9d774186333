from __future__ import annotations

import asyncio

from betcode.sessions.fanout import FanoutHub


def frames(first: int, count: int, size: int = 10) -> list[tuple[int, bytes]]:
    return [(seq, bytes(size)) for seq in range(first, first + count)]


def test_every_subscriber_gets_the_same_bytes_objects() -> None:
    hub = FanoutHub()
    a = hub.subscribe("a", capacity=8)
    b = hub.subscribe("b", capacity=8)
    published = frames(1, 3)
    hub.publish(published)
    got_a = a.take(100, 1 << 20)
    got_b = b.take(100, 1 << 20)
    assert got_a == published
    assert all(x[1] is y[1] for x, y in zip(got_a, got_b, strict=True))


def test_overflow_marks_only_the_slow_subscriber_lagging() -> None:
    hub = FanoutHub()
    slow = hub.subscribe("slow", capacity=4)
    fast = hub.subscribe("fast", capacity=4)
    hub.publish(frames(1, 3))
    assert fast.take(100, 1 << 20) == frames(1, 3)
    hub.publish(frames(4, 3))
    assert slow.lagging is True
    assert len(slow) == 0
    assert fast.lagging is False
    assert [seq for seq, _ in fast.take(100, 1 << 20)] == [4, 5, 6]
    hub.publish(frames(7, 1))
    assert len(slow) == 0  # a lagging queue takes nothing until it resumes
    slow.resume_after_lag()
    hub.publish(frames(8, 1))
    assert [seq for seq, _ in slow.take(100, 1 << 20)] == [8]


def test_take_respects_count_and_byte_caps_but_returns_at_least_one() -> None:
    hub = FanoutHub()
    sub = hub.subscribe("a", capacity=100)
    hub.publish(frames(1, 10, size=100))
    assert len(sub.take(3, 1 << 20)) == 3
    assert len(sub.take(100, 250)) == 2
    big = hub.subscribe("b", capacity=10)
    hub.publish(frames(11, 1, size=1000))
    assert len(big.take(100, 10)) == 1


async def test_wait_wakes_on_publish_and_on_close() -> None:
    hub = FanoutHub()
    sub = hub.subscribe("a", capacity=10)
    waiter = asyncio.create_task(sub.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    hub.publish(frames(1, 1))
    await asyncio.wait_for(waiter, 10)
    sub.take(10, 1 << 20)
    waiter = asyncio.create_task(sub.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    hub.unsubscribe(sub)
    await asyncio.wait_for(waiter, 10)
    assert sub.closed
    assert len(hub) == 0
