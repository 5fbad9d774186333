"""The input lock's idle timer on a real event loop: the lock moves by itself from a holder that
sends nothing while someone waits, and only then."""

# The tests assert a state, change it through a method, and assert it again: mypy keeps the
# first assertion's narrowing across the call and takes what follows for unreachable.
# mypy: disable-error-code="unreachable"

from __future__ import annotations

import asyncio

import pytest

from betcode.sessions.input_lock import InputLock, NoInputLock


class FrozenClock:
    """The lock's notion of time, moved only by the test (the timer itself runs on the loop)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Handovers:
    def __init__(self) -> None:
        self.holders: list[str] = []
        self.changed = asyncio.Event()

    def __call__(self, holder: str | None) -> None:
        assert holder is not None
        self.holders.append(holder)
        self.changed.set()

    async def next(self) -> str:
        await asyncio.wait_for(self.changed.wait(), 10)
        self.changed.clear()
        return self.holders[-1]


def waiting_for_lock(lock: InputLock, client_id: str) -> None:
    with pytest.raises(NoInputLock):
        lock.check_input(client_id)


async def test_idle_holder_loses_the_lock_to_the_first_waiter_and_is_told() -> None:
    lock = InputLock(transfer_timeout=10, idle_transfer=0.05)
    handovers = Handovers()
    for client in ("a", "b", "c"):
        lock.attach(client)
    lock.watch(handovers)  # reports moves from here on (not the first holder)
    waiting_for_lock(lock, "c")
    waiting_for_lock(lock, "b")
    assert await handovers.next() == "c"
    assert lock.holder == "c"
    # b still waits, so c is now on the clock in turn.
    assert await handovers.next() == "b"
    assert lock.waiters == []
    assert not lock.idle_timer_armed


async def test_no_timer_while_nobody_waits() -> None:
    lock = InputLock(transfer_timeout=10, idle_transfer=0.01)
    handovers = Handovers()
    lock.attach("a")
    lock.attach("b")
    lock.watch(handovers)  # reports moves from here on (not the first holder)
    assert not lock.idle_timer_armed
    waiting_for_lock(lock, "b")
    assert lock.idle_timer_armed
    lock.detach("b")
    await asyncio.sleep(0.05)  # let the armed timer fire with nobody waiting any more
    assert not lock.idle_timer_armed
    assert lock.holder == "a"
    assert handovers.holders == []


async def test_a_holder_that_keeps_typing_keeps_the_lock() -> None:
    clock = FrozenClock()
    lock = InputLock(transfer_timeout=10, idle_transfer=0.02, clock=clock)
    handovers = Handovers()
    lock.attach("a")
    lock.attach("b")
    lock.watch(handovers)  # reports moves from here on (not the first holder)
    waiting_for_lock(lock, "b")
    clock.now += 0.015
    lock.check_input("a")  # input just before the idle time ran out
    clock.now += 0.015  # idle for less than the limit since that input
    await asyncio.sleep(0.1)  # the timer fires (more than once) and finds a active
    assert lock.holder == "a"
    assert lock.idle_timer_armed
    clock.now += 0.02
    assert await handovers.next() == "b"


async def test_retime_applies_a_shorter_idle_time_to_a_waiting_lock() -> None:
    lock = InputLock(transfer_timeout=10, idle_transfer=3600)
    handovers = Handovers()
    lock.attach("a")
    lock.attach("b")
    lock.watch(handovers)  # reports moves from here on (not the first holder)
    waiting_for_lock(lock, "b")
    lock.retime(transfer_timeout=5, idle_transfer=0.01)
    assert await handovers.next() == "b"
    assert lock.transfer_timeout == 5


async def test_close_stops_the_timer() -> None:
    lock = InputLock(transfer_timeout=10, idle_transfer=0.01)
    handovers = Handovers()
    lock.attach("a")
    lock.attach("b")
    lock.watch(handovers)  # reports moves from here on (not the first holder)
    waiting_for_lock(lock, "b")
    lock.close()
    assert not lock.idle_timer_armed
    await asyncio.sleep(0.05)
    assert lock.holder == "a"
    assert handovers.holders == []
