"""The transport's budgets and deadlines (server/http2/limits.py) on their own."""

from __future__ import annotations

import asyncio

from betcode.server.http2.limits import Budget, Deadline


def test_a_budget_refuses_past_its_limit_within_a_window_and_renews_after() -> None:
    budget = Budget(3, window=10.0)
    assert [budget.spend(100.0 + i) for i in range(5)] == [True, True, True, False, False]
    assert budget.spend(110.0)  # a new window from here
    assert [budget.spend(115.0) for _ in range(3)] == [True, True, False]


async def test_a_deadline_expires_only_after_its_timeout_without_a_stop() -> None:
    loop = asyncio.get_running_loop()
    expired = asyncio.Event()
    deadline = Deadline(loop, 0.2, expired.set)
    deadline.start(loop.time())
    deadline.start(loop.time() + 10)  # already counting: the first start stands
    async with asyncio.timeout(5):
        await expired.wait()


async def test_a_stopped_deadline_does_not_expire_and_a_restart_counts_anew() -> None:
    loop = asyncio.get_running_loop()
    expired_at: asyncio.Future[float] = loop.create_future()
    deadline = Deadline(loop, 0.2, lambda: expired_at.set_result(loop.time()))
    deadline.start(loop.time())
    await asyncio.sleep(0.1)
    deadline.stop()
    await asyncio.sleep(0.3)
    assert not expired_at.done()
    restarted = loop.time()
    deadline.start(restarted)
    async with asyncio.timeout(5):
        assert await expired_at >= restarted + 0.2
    deadline.cancel()


async def test_a_zero_timeout_never_expires() -> None:
    loop = asyncio.get_running_loop()
    expired: list[bool] = []
    deadline = Deadline(loop, 0, lambda: expired.append(True))
    deadline.start(loop.time() - 3600)
    await asyncio.sleep(0.1)
    assert expired == []
