"""How a reference names a session, request, subagent, worktree or rescue (`ids`), and the
sessions table."""

from __future__ import annotations

from typing import Any

import pytest
from chat_fake_daemon import FakeAgentService

from betcode.cli.connection import DaemonClient, SessionNotFound
from betcode.cli.exit_codes import ExitCode
from betcode.cli.ids import (
    PLANS,
    REQUESTS,
    RESCUES,
    SESSIONS,
    SUBAGENTS,
    WORKTREES,
    AmbiguousReference,
    IdKind,
    NotFound,
    PrefixTooShort,
    WaitingRequest,
    find_session,
    short_id,
)
from betcode.cli.sessions_cmd import table
from betcode.v1 import agent_pb2, subagent_pb2, worktree_pb2

IDS = ("abc123-one", "abc456-two", "def789")
NAMES = ("fix-login", "docs", "")


def waiting(request_id: str, session_name: str) -> WaitingRequest:
    return WaitingRequest(agent_pb2.PendingPermission(request_id=request_id), session_name)


def items_of(kind: IdKind[Any]) -> list[Any]:
    """Three items of `kind` with IDS and (where the kind has names) NAMES."""
    if kind is SESSIONS:
        return [agent_pb2.SessionSummary(id=i, name=n) for i, n in zip(IDS, NAMES, strict=True)]
    if kind is SUBAGENTS:
        return [subagent_pb2.SubagentInfo(id=i, name=n) for i, n in zip(IDS, NAMES, strict=True)]
    if kind is WORKTREES:
        return [worktree_pb2.WorktreeDetail(id=i, name=n) for i, n in zip(IDS, NAMES, strict=True)]
    if kind is REQUESTS:  # named by the session that asks
        return [waiting(i, n) for i, n in zip(IDS, NAMES, strict=True)]
    return [worktree_pb2.RescueInfo(id=i) for i in IDS]


KINDS = pytest.mark.parametrize(
    "kind", [SESSIONS, REQUESTS, SUBAGENTS, WORKTREES, RESCUES], ids=lambda k: k.noun
)


@KINDS
@pytest.mark.parametrize(
    ("reference", "found"),
    [
        ("def789", "def789"),
        ("def7", "def789"),
        ("abc1", "abc123-one"),
        ("abc456-two", "abc456-two"),
    ],
)
def test_an_id_or_a_unique_start_of_it(kind: IdKind[Any], reference: str, found: str) -> None:
    assert kind.id_of(kind.pick(reference, items_of(kind))) == found


@pytest.mark.parametrize("kind", [SESSIONS, REQUESTS, SUBAGENTS, WORKTREES], ids=lambda k: k.noun)
def test_a_name(kind: IdKind[Any]) -> None:
    assert kind.id_of(kind.pick("fix-login", items_of(kind))) == "abc123-one"


def test_a_session_name_with_two_waiting_requests_lists_both() -> None:
    two = [waiting(i, "fix") for i in IDS[:2]]
    with pytest.raises(AmbiguousReference, match=r"abc123-one \(fix\), abc456-two \(fix\)"):
        REQUESTS.pick("fix", two)
    assert [c.value for c in REQUESTS.completions(two, "f")] == ["fix"]  # offered once


def test_an_exact_id_wins_over_a_name_and_a_name_over_a_prefix() -> None:
    sessions = [
        agent_pb2.SessionSummary(id="abcd-1", name="abcd"),
        agent_pb2.SessionSummary(id="abcd", name="other"),
        agent_pb2.SessionSummary(id="beef-2", name="abcd-"),
    ]
    assert SESSIONS.pick("abcd", sessions).id == "abcd"
    assert SESSIONS.pick("abcd-", sessions).id == "beef-2"


@KINDS
def test_an_ambiguous_start_lists_the_matches(kind: IdKind[Any]) -> None:
    with pytest.raises(AmbiguousReference) as caught:
        kind.pick("abc1", [*items_of(kind), *items_of(kind)[:1]])
    assert caught.value.exit_code == ExitCode.INVALID_ARGUMENTS
    with pytest.raises(AmbiguousReference) as caught:
        kind.pick("abc4", [*items_of(kind), *items_of(kind)[1:2]])
    assert f"'abc4' matches 2 {kind.noun}s: abc456-two" in str(caught.value)


def test_an_ambiguous_name_lists_ids_and_names() -> None:
    twins = [agent_pb2.SessionSummary(id=i, name="same") for i in ("1111-a", "2222-b")]
    with pytest.raises(AmbiguousReference, match=r"1111-a \(same\), 2222-b \(same\)"):
        SESSIONS.pick("same", twins)


def test_many_matches_are_listed_up_to_five() -> None:
    many = [agent_pb2.SessionSummary(id=f"abcd-{n}") for n in range(8)]
    with pytest.raises(AmbiguousReference, match="abcd-4 and 3 more; give more of the id"):
        SESSIONS.pick("abcd", many)


@KINDS
def test_a_start_shorter_than_four_characters_is_refused(kind: IdKind[Any]) -> None:
    with pytest.raises(PrefixTooShort, match="at least 4 characters") as caught:
        kind.pick("def", items_of(kind))
    assert caught.value.exit_code == ExitCode.INVALID_ARGUMENTS


@KINDS
@pytest.mark.parametrize("reference", ["zzzz", "zz", ""])
def test_no_match_is_not_found_with_where_to_look(kind: IdKind[Any], reference: str) -> None:
    with pytest.raises(NotFound) as caught:
        kind.pick(reference, items_of(kind))
    assert caught.value.exit_code == ExitCode.SESSION_NOT_FOUND
    assert f"no {kind.noun} {reference!r} in the daemon; `{kind.listing}` shows them" in str(
        caught.value
    )


def test_completion_offers_ids_and_names_that_start_so() -> None:
    offered = SESSIONS.completions(items_of(SESSIONS), "")
    assert [(c.value, c.help) for c in offered] == [
        ("abc123-one", "fix-login"),
        ("fix-login", "abc123-one"),
        ("abc456-two", "docs"),
        ("docs", "abc456-two"),
        ("def789", None),
    ]
    assert [c.value for c in SESSIONS.completions(items_of(SESSIONS), "d")] == ["docs", "def789"]


async def test_find_session_asks_the_daemon(client: DaemonClient, fake: FakeAgentService) -> None:
    fake.sessions = items_of(SESSIONS)
    assert (await find_session(client, "fix-login")).id == "abc123-one"
    with pytest.raises(SessionNotFound):
        await find_session(client, "nope")


def test_table_aligns_columns_and_leaves_the_last_unpadded() -> None:
    assert table(("ID", "NAME", "NOTE"), [("a", "longer", "x"), ("bbbb", "n", "")]) == [
        "ID    NAME    NOTE",
        "a     longer  x",
        "bbbb  n",
    ]


# Two plans and two cost requests whose UUIDs share their first three characters.
PLAN_IDS = (
    "orch-3f6c0a1b-8d2e-4c5f-9a7b-1e2d3c4b5a69",
    "orch-3f6d9e8f-7a6b-4c5d-8e9f-0a1b2c3d4e5f",
)
COST_IDS = (
    "cost-0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e",
    "cost-0b1f5e6d-7c8b-4a9f-8e7d-6c5b4a3f2e1d",
)


def test_a_short_id_keeps_eight_characters_after_a_kind_word() -> None:
    assert [short_id(i) for i in PLAN_IDS] == ["orch-3f6c0a1b", "orch-3f6d9e8f"]
    assert [short_id(i) for i in COST_IDS] == ["cost-0b1c2d3e", "cost-0b1f5e6d"]
    session = "5f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
    assert short_id(session) == "5f0c1a2b"
    assert short_id("abc123-one") == "abc123-o"


def test_what_a_table_prints_names_the_plan_or_request() -> None:
    plans = [subagent_pb2.OrchestrationInfo(id=i) for i in PLAN_IDS]
    for plan in plans:
        assert PLANS.pick(short_id(plan.id), plans) is plan
    requests = [waiting(i, "") for i in COST_IDS]
    for request in requests:
        assert REQUESTS.pick(short_id(request.row.request_id), requests) is request


def test_the_kind_word_does_not_count_towards_the_four_characters() -> None:
    plans = [subagent_pb2.OrchestrationInfo(id=PLAN_IDS[0])]
    for reference in ("orch", "orch-", "orch-3f6"):
        with pytest.raises(PrefixTooShort, match="after 'orch-'"):
            PLANS.pick(reference, plans)
    assert PLANS.pick("orch-3f6c", plans) is plans[0]
