"""The daemon's event loop: uvloop where it is installed, else asyncio's own.

uvloop runs the same asyncio code on libuv with less CPU per callback, and the daemon is made of
callbacks: with 10 per-event clients at 1,000 lines/s its loop thread used about a third less
CPU and the line→client p99 dropped from 2.8–5.9 ms to 2.1–3.6 ms (benchmarks/README.md).
``BETCODE_EVENT_LOOP=asyncio`` opts out, e.g. to rule uvloop out while chasing a bug.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

EVENT_LOOP_ENV = "BETCODE_EVENT_LOOP"
EVENT_LOOPS = ("uvloop", "asyncio")

T = TypeVar("T")


class EventLoopUnavailable(ValueError):
    """BETCODE_EVENT_LOOP names a loop this installation cannot run."""


def chosen_event_loop(environ: Mapping[str, str] = os.environ) -> str:
    """``uvloop`` or ``asyncio``: the environment's choice, else uvloop when installed."""
    wanted = environ.get(EVENT_LOOP_ENV, "").strip().lower()
    installed = importlib.util.find_spec("uvloop") is not None
    if not wanted:
        return "uvloop" if installed else "asyncio"
    if wanted not in EVENT_LOOPS:
        raise EventLoopUnavailable(
            f"{EVENT_LOOP_ENV}={wanted!r} is not one of: {', '.join(EVENT_LOOPS)}"
        )
    if wanted == "uvloop" and not installed:
        raise EventLoopUnavailable(f"{EVENT_LOOP_ENV}=uvloop but uvloop is not installed")
    return wanted


def running_event_loop() -> str:
    """The name of the loop this coroutine runs on, for the daemon's start-up log."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], loop_name: str) -> T:
    """``asyncio.run(main)`` on the named loop (a name from ``chosen_event_loop``)."""
    if loop_name == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)
