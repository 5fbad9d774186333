"""`betcode chat` start-up: which session to attach to, and no daemon → a named error."""

from __future__ import annotations

from pathlib import Path

import pytest
from chat_fake_daemon import FakeAgentService

from betcode.cli.chat import ChatOptions, NoSessionToContinue, chat
from betcode.cli.chat.launch import pick_session
from betcode.cli.connection import DaemonClient, DaemonUnavailable, SessionNotFound
from betcode.v1 import agent_pb2


def summary(session_id: str, cwd: str, updated: int) -> agent_pb2.SessionSummary:
    made = agent_pb2.SessionSummary(id=session_id, working_directory=cwd)
    made.updated_at.FromSeconds(updated)
    return made


async def test_explicit_session_is_found_by_prefix_or_name(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    fake.sessions = [summary("sess-x-full-id", "/w", 1), summary("other", "/w", 9)]
    fake.sessions[0].name = "fix-login"
    for reference in ("sess-x-full-id", "sess-x", "fix-login"):
        options = ChatOptions(session_id=reference, continue_last=True)
        assert await pick_session(client, options, Path("/w")) == "sess-x-full-id"


async def test_an_unknown_session_fails_before_the_screen_opens(client: DaemonClient) -> None:
    with pytest.raises(SessionNotFound, match="no session 'nope'") as caught:
        await pick_session(client, ChatOptions(session_id="nope"), Path("/w"))
    assert caught.value.exit_code == 6


async def test_no_session_flag_means_a_new_session(client: DaemonClient) -> None:
    assert await pick_session(client, ChatOptions(), Path("/w")) == ""


async def test_continue_takes_the_latest_session_of_the_directory(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    fake.sessions = [summary("old", "/w", 1), summary("new", "/w", 9), summary("far", "/x", 99)]
    assert await pick_session(client, ChatOptions(continue_last=True), Path("/w")) == "new"
    assert fake.unary[-1][1].working_directory == "/w"


async def test_continue_with_nothing_to_continue(client: DaemonClient) -> None:
    with pytest.raises(NoSessionToContinue, match="no BetCode session to continue in /w") as e:
        await pick_session(client, ChatOptions(continue_last=True), Path("/w"))
    assert e.value.exit_code == 6


async def test_no_daemon_fails_before_the_screen_opens(tmp_path: Path) -> None:
    options = ChatOptions(socket=str(tmp_path / "missing.sock"), cwd=tmp_path)
    with pytest.raises(DaemonUnavailable, match="betcode daemon start"):
        await chat(options)


async def test_a_worktree_resumes_its_latest_session(
    client: DaemonClient, fake: FakeAgentService
) -> None:
    fake.sessions = [summary("old", "/wt", 1), summary("latest", "/wt", 9)]
    assert await pick_session(client, ChatOptions(), Path("/wt"), "wt-1") == "latest"
    assert fake.unary[-1][1].worktree_id == "wt-1"
    fake.sessions = []
    assert await pick_session(client, ChatOptions(), Path("/wt"), "wt-1") == ""  # a new one
