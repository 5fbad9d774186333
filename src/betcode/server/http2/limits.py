"""The O(1) pieces of a connection's limits (docs/TRANSPORT.md): budgets per time window, lazy
deadlines, the server's settings as h2 enforces them, and whether h2 holds part of a frame."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import h2.connection
import h2.settings

# h2's own ceiling on a client's concurrent streams (see AnnouncedSettings).
_H2_STREAM_CEILING = 2**31 - 1


class Budget:
    """At most ``limit`` spends per ``window`` seconds, counted in fixed windows: O(1)."""

    __slots__ = ("_count", "_ends", "_limit", "_window")

    def __init__(self, limit: int, window: float) -> None:
        self._limit, self._window = limit, window
        self._count, self._ends = 0, 0.0

    def spend(self, now: float) -> bool:
        """Counts one; False once over the budget of the current window."""
        if now >= self._ends:
            self._count, self._ends = 0, now + self._window
        self._count += 1
        return self._count <= self._limit


class Deadline:
    """Calls ``expired`` once ``timeout`` seconds pass between ``start`` and ``stop``. Both are
    O(1) with no timer churn: one timer at most per timeout period, re-armed for what is left
    when it fires early. A timeout of 0 never expires."""

    __slots__ = ("_expired", "_loop", "_since", "_timeout", "_timer")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, timeout: float, expired: Callable[[], None]
    ) -> None:
        self._loop, self._timeout, self._expired = loop, timeout, expired
        self._since: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self, now: float) -> None:
        """Starts counting, unless already counting."""
        if self._since is None:
            self._since = now
            if self._timer is None and self._timeout > 0:
                self._timer = self._loop.call_at(now + self._timeout, self._due)

    def stop(self) -> None:
        self._since = None

    def cancel(self) -> None:
        self._since = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        if self._since is None:
            return
        ends = self._since + self._timeout
        if ends > self._loop.time():
            self._timer = self._loop.call_at(ends, self._due)
        else:
            self._since = None
            self._expired()


class AnnouncedSettings(h2.settings.Settings):
    """The server's settings as announced, with h2's own check of a client's concurrent streams
    lifted: h2 ends the whole connection when a client opens one stream too many, where HTTP/2
    (RFC 9113, 5.1.2) lets the server refuse that stream alone, which GrpcConnection does."""

    @property
    def max_concurrent_streams(self) -> int:
        return _H2_STREAM_CEILING

    @max_concurrent_streams.setter
    def max_concurrent_streams(self, value: int) -> None:
        self[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = value


def frame_unfinished(connection: h2.connection.H2Connection) -> bool:
    """Whether h2 holds part of a preface, a frame or a header block (a HEADERS frame whose
    CONTINUATION frames are still due). h2 keeps these in its frame buffer's own fields."""
    buffer = connection.incoming_buffer
    return bool(buffer._preamble_len or buffer._data or buffer._headers_buffer)
