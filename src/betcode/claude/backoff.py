"""Crash recovery arithmetic (pure): the restart delay and the crash window.

The n-th crash inside the current window waits delay(n - 1): crashes far apart always restart
after the initial delay, a crash loop backs off until the window gives up.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from betcode.protocol.framing import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    PayloadLimitError,
    validate_max_payload_bytes,
)


class InvalidSupervisorPolicy(ValueError):
    """A supervisor policy number outside what makes sense."""


def backoff_delay(attempt: int, initial: float, maximum: float, multiplier: float) -> float:
    """min(initial * multiplier**attempt, maximum), for attempt = 0, 1, 2, ..."""
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    # Past the cap the power only grows: stop before it overflows a float.
    if multiplier > 1 and attempt > math.log(maximum / initial, multiplier) + 1:
        return maximum
    return min(initial * multiplier**attempt, maximum)


class CrashWindow:
    """Counts crashes in a sliding window; `record` says whether to give up."""

    def __init__(self, max_crashes: int, window_seconds: float) -> None:
        if max_crashes < 1:
            raise InvalidSupervisorPolicy(f"max_crashes must be >= 1, got {max_crashes}")
        if window_seconds <= 0:
            raise InvalidSupervisorPolicy(f"window_seconds must be > 0, got {window_seconds}")
        self.max_crashes = max_crashes
        self.window_seconds = window_seconds
        self._times: deque[float] = deque()

    def _expire(self, now: float) -> None:
        while self._times and now - self._times[0] >= self.window_seconds:
            self._times.popleft()

    def record(self, now: float) -> bool:
        """Note a crash at `now` (monotonic seconds); True when max_crashes fall in the window."""
        self._expire(now)
        self._times.append(now)
        return len(self._times) >= self.max_crashes

    def count(self, now: float) -> int:
        self._expire(now)
        return len(self._times)

    def clear(self) -> None:
        self._times.clear()


@dataclass(frozen=True)
class SupervisorPolicy:
    """Every supervisor number, in seconds (config maps its *_ms settings onto these).

    idle_reap_seconds None keeps idle processes forever.
    """

    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    backoff_multiplier: float = 2.0
    max_crashes: int = 5
    window_seconds: float = 60.0
    watchdog_seconds: float = 300.0
    kill_grace_seconds: float = 5.0
    idle_reap_seconds: float | None = 600.0
    max_line_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES

    def __post_init__(self) -> None:
        positive = {
            "backoff_initial": self.backoff_initial,
            "window_seconds": self.window_seconds,
            "watchdog_seconds": self.watchdog_seconds,
            "kill_grace_seconds": self.kill_grace_seconds,
        }
        if self.idle_reap_seconds is not None:
            positive["idle_reap_seconds"] = self.idle_reap_seconds
        for name, value in positive.items():
            if not value > 0:
                raise InvalidSupervisorPolicy(f"{name} must be > 0, got {value}")
        if self.backoff_max < self.backoff_initial:
            raise InvalidSupervisorPolicy(
                f"backoff_max ({self.backoff_max}) is below backoff_initial "
                f"({self.backoff_initial})"
            )
        if self.backoff_multiplier < 1:
            raise InvalidSupervisorPolicy(
                f"backoff_multiplier must be >= 1, got {self.backoff_multiplier}"
            )
        if self.max_crashes < 1:
            raise InvalidSupervisorPolicy(f"max_crashes must be >= 1, got {self.max_crashes}")
        try:
            validate_max_payload_bytes(self.max_line_bytes)
        except PayloadLimitError as error:
            raise InvalidSupervisorPolicy(f"max_line_bytes: {error}") from None

    def restart_delay(self, attempt: int) -> float:
        return backoff_delay(
            attempt, self.backoff_initial, self.backoff_max, self.backoff_multiplier
        )

    def crash_window(self) -> CrashWindow:
        return CrashWindow(self.max_crashes, self.window_seconds)
