"""Advisory worktree locks (SAG-18): the compatibility table and waiting for a release."""

from __future__ import annotations

import asyncio

import pytest

from betcode.subagents.locks import LockMode, WorktreeLocks, compatible

N, S, X = LockMode.NONE, LockMode.SHARED, LockMode.EXCLUSIVE


@pytest.mark.parametrize(
    ("held", "wanted", "ok"),
    [
        (N, N, True),
        (N, S, True),
        (S, S, True),
        (S, N, True),
        (N, X, False),
        (X, N, False),
        (S, X, False),
        (X, S, False),
        (X, X, False),
    ],
)
def test_compatibility(held: LockMode, wanted: LockMode, ok: bool) -> None:
    assert compatible(held, wanted) is ok


async def test_a_conflicting_holder_waits_until_the_other_lets_go() -> None:
    locks = WorktreeLocks()
    assert locks.try_acquire("/w", "a", X)
    assert not locks.try_acquire("/w", "b", N)
    assert locks.try_acquire("/elsewhere", "b", X)  # other directories are free
    waiting = asyncio.create_task(locks.acquire("/w", "c", S))
    await asyncio.sleep(0)
    assert not waiting.done()
    locks.release("a")
    await asyncio.wait_for(waiting, 10)
    assert locks.holders("/w") == {"c": S}
