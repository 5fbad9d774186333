"""Naming a session by a unique start of its id (`find_session`), and the sessions table."""

from __future__ import annotations

import pytest
from chat_fake_daemon import FakeAgentService

from betcode.cli.connection import DaemonClient, SessionNotFound
from betcode.cli.exit_codes import ExitCode
from betcode.cli.sessions_cmd import AmbiguousSession, find_session, table
from betcode.v1 import agent_pb2

IDS = ("abc123-one", "abc456-two", "def789")


@pytest.fixture(autouse=True)
def sessions(fake: FakeAgentService) -> None:
    fake.sessions = [agent_pb2.SessionSummary(id=session_id) for session_id in IDS]


@pytest.mark.parametrize(
    ("reference", "found"), [("def789", "def789"), ("d", "def789"), ("abc1", "abc123-one")]
)
async def test_an_id_or_a_unique_start_of_it(
    client: DaemonClient, reference: str, found: str
) -> None:
    assert (await find_session(client, reference)).id == found


async def test_an_exact_id_wins_over_longer_ids_it_starts(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    fake.sessions.append(agent_pb2.SessionSummary(id="def789-longer"))
    assert (await find_session(client, "def789")).id == "def789"


async def test_an_ambiguous_start_is_an_invalid_argument(client: DaemonClient) -> None:
    with pytest.raises(AmbiguousSession) as caught:
        await find_session(client, "abc")
    assert caught.value.exit_code == ExitCode.INVALID_ARGUMENTS
    assert "abc123-one, abc456-two" in str(caught.value)


@pytest.mark.parametrize("reference", ["zzz", ""])
async def test_no_match_is_session_not_found(client: DaemonClient, reference: str) -> None:
    with pytest.raises(SessionNotFound) as caught:
        await find_session(client, reference)
    assert caught.value.exit_code == ExitCode.SESSION_NOT_FOUND


def test_table_aligns_columns_and_leaves_the_last_unpadded() -> None:
    assert table(("ID", "NAME", "NOTE"), [("a", "longer", "x"), ("bbbb", "n", "")]) == [
        "ID    NAME    NOTE",
        "a     longer  x",
        "bbbb  n",
    ]
