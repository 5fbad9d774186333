"""The daemon's long-running tasks (audit retention, permission sweeps, health checks, the relay
tunnel): started by the pieces that own them, all cancelled first at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, work: Coroutine[Any, Any, None], name: str | None = None) -> None:
        self._tasks.append(asyncio.create_task(work, name=name))

    def cancel(self) -> None:
        """Newest first: what was started on top of the others stops before them."""
        for task in reversed(self._tasks):
            task.cancel()
