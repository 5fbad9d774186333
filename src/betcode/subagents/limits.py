"""Auto-approve limits and the checks a spawn request passes (SAG-11..13, SAG-17). Pure.

A subagent may auto-approve only with an explicit `allowed_tools` list; its time box and rate
buckets default to the values of docs/GRPC.md#subagents and are refused outside their ranges. `env`
keys of the families that steer claude or BetCode themselves are refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

REFUSED_ENV_PREFIXES = ("ANTHROPIC_", "BETCODE_", "CLAUDE_", "DYLD_")
REFUSED_ENV_NAMES = frozenset({"LD_PRELOAD"})
BASH_TOOLS = frozenset({"Bash"})
WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
MINUTE = 60.0


class DelegationError(ValueError):
    """A spawn request refused before anything starts; `code` is an application error code
    (docs/GRPC.md#error-codes)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# (default, lowest, highest) of each limit (docs/GRPC.md#subagents: the time box is capped at 4 h).
RANGES: Mapping[str, tuple[int, int, int]] = {
    "max_duration_seconds": (3600, 60, 14_400),
    "tool_calls_per_minute": (60, 10, 300),
    "tool_calls_per_session": (1000, 100, 10_000),
    "bash_commands_per_minute": (20, 5, 60),
    "write_operations_per_minute": (30, 10, 100),
}


@dataclass(frozen=True, slots=True)
class AutoApproveLimits:
    max_duration_seconds: int = 3600
    tool_calls_per_minute: int = 60
    tool_calls_per_session: int = 1000
    bash_commands_per_minute: int = 20
    write_operations_per_minute: int = 30
    queue_on_rate_limit: bool = False


def limits_from(values: Mapping[str, int], queue_on_rate_limit: bool = False) -> AutoApproveLimits:
    """Limits from request values (0 or absent = the default); DelegationError out of range."""
    checked: dict[str, int] = {}
    for name, (default, low, high) in RANGES.items():
        value = int(values.get(name, 0) or 0)
        if value == 0:
            value = default
        if not low <= value <= high:
            raise DelegationError(
                "INVALID_PERMISSION_CONFIG",
                f"auto_approve_config.{name} is {value}; allowed {low} to {high}",
            )
        checked[name] = value
    return AutoApproveLimits(**checked, queue_on_rate_limit=queue_on_rate_limit)


def check_delegation(
    auto_approve: bool, allowed_tools: Sequence[str], env: Mapping[str, str]
) -> None:
    """SAG-11 and SAG-17; raises DelegationError."""
    if auto_approve and not allowed_tools:
        raise DelegationError(
            "INVALID_PERMISSION_CONFIG",
            "auto_approve needs an explicit allowed_tools list (the tools it may approve)",
        )
    for tool in allowed_tools:
        if not tool.strip() or any(ch.isspace() for ch in tool.split("(", 1)[0]):
            raise DelegationError("INVALID_ARGUMENT", f"bad tool name {tool!r} in allowed_tools")
    refused = sorted(key for key in env if env_key_refused(key))
    if refused:
        raise DelegationError(
            "INVALID_ARGUMENT",
            f"env keys {refused} are refused: ANTHROPIC_*, BETCODE_*, CLAUDE_*, DYLD_* and "
            "LD_PRELOAD steer claude or BetCode themselves",
        )


def env_key_refused(key: str) -> bool:
    upper = key.upper()
    return upper in REFUSED_ENV_NAMES or upper.startswith(REFUSED_ENV_PREFIXES)


def tool_names(allowed_tools: Sequence[str]) -> list[str]:
    """The bare tool names of `allowed_tools` (`Bash(git:*)` → `Bash`), for claude's --tools."""
    names: list[str] = []
    for tool in allowed_tools:
        name = tool.split("(", 1)[0].strip()
        if name not in names:
            names.append(name)
    return names


class TokenBucket:
    """`capacity` tokens refilled evenly over `period` seconds (STO-14's buckets)."""

    def __init__(self, capacity: int, period: float, now: float) -> None:
        self.capacity = capacity
        self._rate = capacity / period
        self._tokens = float(capacity)
        self._at = now

    def _refill(self, now: float) -> None:
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self._rate)
        self._at = now

    def available(self, now: float) -> bool:
        self._refill(now)
        return self._tokens >= 1.0

    def take(self) -> None:
        self._tokens -= 1.0

    def seconds_until_token(self, now: float) -> float:
        self._refill(now)
        return max(0.0, (1.0 - self._tokens) / self._rate)


class RateBudget:
    """The buckets of one auto-approving subagent: every call, Bash calls, writes, lifetime."""

    def __init__(self, limits: AutoApproveLimits, now: float) -> None:
        self.limits = limits
        self._calls = TokenBucket(limits.tool_calls_per_minute, MINUTE, now)
        self._bash = TokenBucket(limits.bash_commands_per_minute, MINUTE, now)
        self._writes = TokenBucket(limits.write_operations_per_minute, MINUTE, now)
        self.used = 0

    def _buckets(self, tool: str) -> list[tuple[str, TokenBucket]]:
        buckets = [("tool_calls_per_minute", self._calls)]
        if tool in BASH_TOOLS:
            buckets.append(("bash_commands_per_minute", self._bash))
        if tool in WRITE_TOOLS:
            buckets.append(("write_operations_per_minute", self._writes))
        return buckets

    def try_take(self, tool: str, now: float) -> str | None:
        """Spends one call of `tool`; the name of the exhausted limit instead, if any."""
        if self.used >= self.limits.tool_calls_per_session:
            return "tool_calls_per_session"
        buckets = self._buckets(tool)
        for name, bucket in buckets:
            if not bucket.available(now):
                return name
        for _, bucket in buckets:
            bucket.take()
        self.used += 1
        return None

    def retry_after(self, tool: str, now: float) -> float:
        """Seconds until every bucket of `tool` has room again; infinite once the lifetime
        budget is spent (it never refills)."""
        if self.used >= self.limits.tool_calls_per_session:
            return math.inf
        return max(bucket.seconds_until_token(now) for _, bucket in self._buckets(tool))
