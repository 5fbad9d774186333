"""Waiting for plain state that has no event to wait on (a supervisor's state, a pid)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], within_s: float = 20.0) -> None:
    """Poll for `condition`; the limit only guards against a hang, it measures nothing."""
    async with asyncio.timeout(within_s):
        while not condition():  # noqa: ASYNC110 - the conditions are plain state, not events
            await asyncio.sleep(0.01)
