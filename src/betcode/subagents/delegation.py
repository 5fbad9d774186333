"""Permission delegation of one subagent (SAG-10..16): what happens to its claude's questions.

By default a question is forwarded: it waits in the bridge's one pending store and shows in the
parent session's stream (permissions.bridge asks `SubagentInbox`, subagents/inbox.py). With
auto-approve, after the permission rules found nothing (the bridge evaluates them first), each
call is checked in SAG-12's order: tool in `allowed_tools`? (else forward) → still one of the
tools claude announced? (else denied: tool_validation_fail) → within the time box?
(else the subagent is ended: subagent_timeout) → rate budget left? (else denied:
rate_limit_exceeded; or, with `queue_on_rate_limit`, queued: asked again once the limit has
room, for at most MAX_QUEUE_SECONDS) → allowed and audited (auto_approve_tool_call).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from betcode.permissions.engine import Behavior, RuleSet, evaluate
from betcode.permissions.rules import InvalidRule, RuleList, RuleSource, parse_rule
from betcode.subagents.limits import AutoApproveLimits, RateBudget

# queue_on_rate_limit: how long a call may wait for its rate limit before it is denied.
MAX_QUEUE_SECONDS = 60.0


class Verdict(enum.Enum):
    FORWARD = "forward"
    ALLOW = "allow"
    DENY = "deny"  # rate limit
    QUEUE = "queue"  # rate limit with queue_on_rate_limit: ask again after retry_after_seconds
    UNKNOWN_TOOL = "unknown_tool"  # not among the tools claude announced: denied
    EXPIRED = "expired"  # the time box is over: the subagent ends


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str = ""
    limit: str = ""  # the exhausted rate limit
    retry_after_seconds: float = 0.0


@dataclass
class Delegation:
    subagent_id: str
    parent_session_id: str
    label: str  # which subagent (and step) asks, as the parent's clients see it
    allowed_tools: Sequence[str] = ()
    auto_approve: bool = False
    limits: AutoApproveLimits = field(default_factory=AutoApproveLimits)
    clock: Callable[[], float] = time.time
    started_at: float = 0.0
    revoked_reason: str | None = None
    auto_approved: int = 0
    approved_ids: list[str] = field(default_factory=list)
    closed: bool = False

    def __post_init__(self) -> None:
        self.started_at = self.started_at or self.clock()
        self._budget = RateBudget(self.limits, self.clock())
        self._allowed = allowed_tools_rules(self.allowed_tools)

    @property
    def auto_approving(self) -> bool:
        return self.auto_approve and self.revoked_reason is None and not self.closed

    def decide(
        self,
        tool_name: str,
        tool_input: Mapping[str, Any],
        cwd: str,
        home: str,
        registry: Sequence[str] = (),
        queued_seconds: float = 0.0,
    ) -> Decision:
        """SAG-12 for one call the permission rules left undecided; `registry`: the tools
        claude announced (empty: not known yet); `queued_seconds`: how long the call has
        waited for a rate limit already. A call is queued only for a limit that refills
        within what is left of MAX_QUEUE_SECONDS (never for the lifetime budget)."""
        if not self.auto_approving:
            return Decision(Verdict.FORWARD)
        covered = evaluate(self._allowed, tool_name, dict(tool_input), cwd=cwd, home=home)
        if covered.behavior is not Behavior.ALLOW:
            return Decision(Verdict.FORWARD, f"{tool_name} is not in allowed_tools")
        if registry and tool_name not in registry:
            return Decision(Verdict.UNKNOWN_TOOL, f"{tool_name} is not one of claude's tools")
        now = self.clock()
        if now - self.started_at >= self.limits.max_duration_seconds:
            return Decision(
                Verdict.EXPIRED,
                f"auto-approve time box of {self.limits.max_duration_seconds} s is over",
            )
        exhausted = self._budget.try_take(tool_name, now)
        if exhausted is not None:
            retry_after = self._budget.retry_after(tool_name, now)
            queue = (
                self.limits.queue_on_rate_limit
                and queued_seconds + retry_after <= MAX_QUEUE_SECONDS
            )
            return Decision(
                Verdict.QUEUE if queue else Verdict.DENY,
                f"auto-approve rate limit {exhausted} reached",
                exhausted,
                retry_after,
            )
        self.auto_approved += 1
        return Decision(Verdict.ALLOW, "auto-approved within the subagent's limits")

    def time_box_left(self) -> float | None:
        """Seconds until the auto-approve time box ends the subagent (None: no time box)."""
        if not self.auto_approve:
            return None
        return max(0.0, self.started_at + self.limits.max_duration_seconds - self.clock())

    def note_approved(self, tool_use_id: str | None) -> None:
        if tool_use_id:
            self.approved_ids.append(tool_use_id)

    def revoke(self, reason: str) -> None:
        self.revoked_reason = reason

    def close(self) -> None:
        self.closed = True


ALLOWED_TOOLS = RuleSource("subagent allowed_tools", RuleList.ALLOW)


def allowed_tools_rules(allowed_tools: Sequence[str]) -> RuleSet:
    """`allowed_tools` as allow rules (`Bash(git:*)` as in settings); raises InvalidRule."""
    return RuleSet(parse_rule(text, ALLOWED_TOOLS) for text in allowed_tools)


def invalid_tools(allowed_tools: Sequence[str]) -> list[str]:
    problems = []
    for text in allowed_tools:
        try:
            parse_rule(text, ALLOWED_TOOLS)
        except InvalidRule as error:
            problems.append(f"{text!r}: {error.reason}")
    return problems
