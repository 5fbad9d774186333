"""Counters of permission decisions by kind, for the health report; each decision is also
reported to observability (metrics by kind, tool and wait time)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

from betcode.observability.hooks import observer


class DecisionKind(StrEnum):
    AUTO_ALLOW = "auto_allow"  # a rule or a session grant allowed it
    AUTO_DENY = "auto_deny"  # a rule or a session grant denied it
    USER_ALLOW = "user_allow"  # a client allowed it (or answered a question)
    USER_DENY = "user_deny"  # a client denied it
    TIMEOUT = "timeout"  # nobody answered before the TTL: soft deny


@dataclass(slots=True)
class DecisionCounters:
    """How many decisions of each kind since the daemon started (read by health)."""

    auto_allow: int = 0
    auto_deny: int = 0
    user_allow: int = 0
    user_deny: int = 0
    timeout: int = 0

    def count(self, kind: DecisionKind, tool_name: str, waited_s: float = 0.0) -> None:
        """One decision of `kind` on a `tool_name` request claude made `waited_s` ago."""
        setattr(self, kind.value, getattr(self, kind.value) + 1)
        observer().permission_decided(kind.value, tool_name, waited_s)

    def snapshot(self) -> dict[str, int]:
        return asdict(self)
