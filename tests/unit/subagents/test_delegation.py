"""Auto-approve decisions (SAG-11..13), rate buckets, limits and the pool (SAG-06). Pure."""

from __future__ import annotations

import asyncio

import pytest

from betcode.config.settings import SubagentSettings
from betcode.subagents.delegation import Delegation, Verdict
from betcode.subagents.limits import (
    AutoApproveLimits,
    DelegationError,
    check_delegation,
    limits_from,
    tool_names,
)
from betcode.subagents.pool import PoolExhausted, SubagentPool


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def delegation(clock: Clock, queue_on_rate_limit: bool = False, **limits: int) -> Delegation:
    return Delegation(
        "sa-1",
        "parent",
        "helper",
        ("Bash(git:*)", "Read", "Write"),
        auto_approve=True,
        limits=AutoApproveLimits(**limits, queue_on_rate_limit=queue_on_rate_limit),
        clock=clock,
    )


def decide(d: Delegation, tool: str, command: str = "git status") -> Verdict:
    tool_input = {"command": command} if tool == "Bash" else {"file_path": "/w/x"}
    return d.decide(tool, tool_input, "/w", "/home").verdict


def test_only_calls_allowed_tools_cover_are_approved_the_rest_forwarded() -> None:
    d = delegation(Clock())
    assert decide(d, "Bash") is Verdict.ALLOW
    assert decide(d, "Bash", "rm -rf /") is Verdict.FORWARD
    assert decide(d, "Edit") is Verdict.FORWARD
    assert d.auto_approved == 1


def test_bash_bucket_empties_then_refills_one_token_at_a_time() -> None:
    clock = Clock()
    d = delegation(clock, bash_commands_per_minute=5)
    assert [decide(d, "Bash") for _ in range(6)] == [Verdict.ALLOW] * 5 + [Verdict.DENY]
    denied = d.decide("Bash", {"command": "git log"}, "/w", "/home")
    assert denied.limit == "bash_commands_per_minute"
    assert denied.retry_after_seconds == pytest.approx(12.0)
    assert decide(d, "Read") is Verdict.ALLOW  # other tools have their own room
    clock.now += 12
    assert decide(d, "Bash") is Verdict.ALLOW


def test_the_lifetime_budget_and_the_time_box_end_auto_approval() -> None:
    clock = Clock()
    d = delegation(clock, tool_calls_per_session=2, max_duration_seconds=60)
    assert decide(d, "Read") is Verdict.ALLOW
    assert decide(d, "Read") is Verdict.ALLOW
    assert d.decide("Read", {"file_path": "/w/x"}, "/w", "/home").limit == "tool_calls_per_session"
    clock.now += 60
    assert decide(d, "Read") is Verdict.EXPIRED


def test_with_queue_on_rate_limit_a_call_over_a_refilling_limit_is_queued_not_denied() -> None:
    clock = Clock()
    d = delegation(clock, True, bash_commands_per_minute=5, tool_calls_per_session=6)
    assert [decide(d, "Bash") for _ in range(5)] == [Verdict.ALLOW] * 5
    queued = d.decide("Bash", {"command": "git log"}, "/w", "/home")
    assert (queued.verdict, queued.limit) == (Verdict.QUEUE, "bash_commands_per_minute")
    assert queued.retry_after_seconds == pytest.approx(12.0)
    # Queued for so long already that the bucket would refill too late: denied.
    late = d.decide("Bash", {"command": "git log"}, "/w", "/home", queued_seconds=50)
    assert late.verdict is Verdict.DENY
    clock.now += 12
    assert decide(d, "Bash") is Verdict.ALLOW
    # The lifetime budget never refills: denied at once, queue or not.
    spent = d.decide("Read", {"file_path": "/w/x"}, "/w", "/home")
    assert (spent.verdict, spent.limit) == (Verdict.DENY, "tool_calls_per_session")


def test_after_a_revoke_every_call_is_forwarded() -> None:
    d = delegation(Clock())
    d.revoke("the user takes over from here")
    assert not d.auto_approving
    assert decide(d, "Read") is Verdict.FORWARD


@pytest.mark.parametrize(
    ("auto", "tools", "env", "code"),
    [
        (True, (), {}, "INVALID_PERMISSION_CONFIG"),
        (False, ("Ba sh",), {}, "INVALID_ARGUMENT"),
        (False, (), {"CLAUDE_CODE_X": "1"}, "INVALID_ARGUMENT"),
        (False, (), {"ld_preload": "x"}, "INVALID_ARGUMENT"),
        (False, (), {"DYLD_LIBRARY_PATH": "x"}, "INVALID_ARGUMENT"),
        (False, (), {"BETCODE_SOCKET": "x"}, "INVALID_ARGUMENT"),
        (False, (), {"ANTHROPIC_API_KEY": "x"}, "INVALID_ARGUMENT"),
    ],
)
def test_spawn_requests_refused_before_anything_starts(
    auto: bool, tools: tuple[str, ...], env: dict[str, str], code: str
) -> None:
    with pytest.raises(DelegationError) as refused:
        check_delegation(auto, tools, env)
    assert refused.value.code == code


def test_limits_default_and_ranges() -> None:
    assert limits_from({}) == AutoApproveLimits()
    assert limits_from({"max_duration_seconds": 14_400}).max_duration_seconds == 14_400
    for name, value in (("max_duration_seconds", 14_401), ("tool_calls_per_minute", 9)):
        with pytest.raises(DelegationError, match=name):
            limits_from({name: value})
    check_delegation(True, ("Read",), {"MY_FLAG": "1"})
    assert tool_names(["Bash(git:*)", "Bash(ls)", "Read"]) == ["Bash", "Read"]


async def test_the_pool_runs_max_concurrent_queues_the_rest_and_refuses_beyond_the_queue() -> None:
    pool = SubagentPool(SubagentSettings(max_concurrent=2, queue_size=1))
    await pool.acquire()
    await pool.acquire()
    waiting = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    assert pool.waiting == 1
    with pytest.raises(PoolExhausted, match="max_concurrent=2"):
        pool.check_room()
    pool.release()
    await waiting
    assert pool.running == 2
    pool.apply_settings(SubagentSettings(max_concurrent=3, queue_size=1))
    pool.check_room()  # a larger pool (a reload) has room at once


def test_a_tool_claude_never_announced_is_denied_not_approved() -> None:
    d = delegation(Clock())
    registry = ("Bash", "Edit")
    assert d.decide("Read", {"file_path": "/w/x"}, "/w", "/home", registry).verdict is (
        Verdict.UNKNOWN_TOOL
    )
    assert d.decide("Bash", {"command": "git log"}, "/w", "/home", registry).verdict is (
        Verdict.ALLOW
    )


def test_the_time_box_counts_from_the_spawn_and_only_with_auto_approve() -> None:
    clock = Clock()
    d = delegation(clock, max_duration_seconds=600)
    clock.now += 100
    assert d.time_box_left() == 500
    clock.now += 1000
    assert d.time_box_left() == 0
    forwarding = Delegation("sa-2", "parent", "plain", (), clock=clock)
    assert forwarding.time_box_left() is None
