"""Cost caps with the real CLI and the mock model (docs/LIMITS.md): a session at its cap asks
before its next turn, in the permission bridge, and the answer decides whether the message is
ever sent; the spend and the waiting request survive a daemon restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from harness.cli_process import Finished, betcode, finish, spawn
from harness.daemon import (
    Client,
    DaemonProcess,
    InProcessDaemon,
    daemon_config,
    daemon_process_env,
    running_daemon,
)
from harness.environment import Workspace
from test_daemon_startup import start_foreground, too_old_claude

from betcode.config.settings import DaemonSettings, LimitSettings
from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.permissions.cost_requests import COST_LIMIT_NOT_SENT, COST_LIMIT_TOOL
from betcode.v1 import agent_pb2, common_pb2

pytestmark = pytest.mark.real_cli

# Far below what one turn of the mock model costs: the first turn reaches it.
TINY_USD = 0.000001
Decision = common_pb2.PermissionDecision


def limited_daemon(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace, **caps: float
) -> contextlib.AbstractAsyncContextManager[InProcessDaemon]:
    settings = DaemonSettings(limits=LimitSettings(**caps))  # type: ignore[arg-type]
    config = daemon_config(
        tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url), settings=settings
    )
    return running_daemon(config)


def limited_daemon_process(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace, limit: str
) -> DaemonProcess:
    """A daemon process (for restarts) started with `--set limit`."""
    root = tmp_path / "daemon"
    root.mkdir()
    environ = daemon_process_env(root, claude_bin, workspace.env(mock_api.base_url))
    return DaemonProcess(root, environ, args=("--set", limit))


@pytest.fixture
async def capped(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[InProcessDaemon]:
    async with limited_daemon(
        tmp_path, claude_bin, mock_api, workspace, session_cost_usd=TINY_USD
    ) as running:
        yield running


def user_inputs(client: Client) -> list[str]:
    return [event.user_input.content for event in client.of_kind("user_input")]


def cost_requests(client: Client) -> list[agent_pb2.PermissionRequest]:
    return [
        event.permission_request
        for event in client.of_kind("permission_request")
        if event.permission_request.tool_name == COST_LIMIT_TOOL
    ]


def sent_to_model(mock_api: MockAnthropic, text: str) -> int:
    """How many of the model's requests end with `text` as the user's latest message."""
    count = 0
    for request in mock_api.message_requests:
        messages = (request.body or {}).get("messages", [])
        last = json.dumps(messages[-1]) if messages else ""
        count += text in last
    return count


async def pending(socket: Path, cwd: Path) -> list[dict[str, object]]:
    listed = await betcode(socket, cwd, "permissions", "pending", "--json")
    assert listed.code == 0, listed.err
    rows: list[dict[str, object]] = json.loads(listed.out)
    return rows


async def start_session(socket: Path, repo: Path, client_id: str) -> Client:
    client = Client(socket, client_id)
    client.converse(agent_pb2.StartConversation(working_directory=str(repo)))
    client.say(f"SCN:plain first turn of {client_id}")
    await client.wait_for("turn_complete", within_s=90)
    return client


async def test_a_run_held_at_its_cap_shows_the_request_and_a_denial_exits_3(
    capped: InProcessDaemon, workspace: Workspace
) -> None:
    socket, repo = capped.socket, workspace.repo
    first = await betcode(socket, repo, "run", "SCN:plain first turn")
    assert first.code == 0, first.err
    held = await spawn(socket, repo, "run", "--continue", "SCN:plain past the cap")
    rows: list[dict[str, object]] = []
    for _ in range(300):
        if rows := await pending(socket, repo):
            break
        await asyncio.sleep(0.2)
    [row] = rows
    listed = await betcode(socket, repo, "permissions", "pending")
    assert "allow another $0.000001?: the message held: SCN:plain past the cap" in listed.out
    request_id = str(row["request_id"])
    denied = await betcode(socket, repo, "permissions", "deny", request_id, "--message", "no")
    assert denied.code == 0, denied.err
    done = await finish(held)  # it used to wait silently for ever
    assert done.code == 3, done.err
    assert f"waiting for your approval of {COST_LIMIT_TOOL}: session " in done.err
    assert f"betcode permissions allow {request_id}" in done.err
    assert f"{COST_LIMIT_NOT_SENT}: no: session " in done.err


async def test_a_session_at_its_cap_asks_and_an_allow_sends_the_message_exactly_once(
    capped: InProcessDaemon, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    socket, repo = capped.socket, workspace.repo
    client = await start_session(socket, repo, "first")
    client.say("SCN:plain the second message")
    [asked] = [(await client.wait_for("permission_request")).permission_request]
    assert asked.tool_name == COST_LIMIT_TOOL
    assert f"session {client.session_id} has spent $" in asked.description
    assert "allow another $0.000001?" in asked.description
    assert dict(asked.input)["message"] == "SCN:plain the second message"
    [row] = await pending(socket, repo)
    assert (row["request_id"], row["tool_name"]) == (asked.request_id, COST_LIMIT_TOOL)
    assert user_inputs(client) == ["SCN:plain first turn of first"]
    assert sent_to_model(mock_api, "the second message") == 0

    allowed = await betcode(socket, repo, "permissions", "allow", asked.request_id)
    assert (allowed.code, allowed.out.strip()) == (0, f"{asked.request_id}: allowed")
    await client.wait_for("turn_complete", count=2, within_s=90)
    again = await betcode(socket, repo, "permissions", "allow", asked.request_id)
    assert again.code == 0, again.err
    assert user_inputs(client) == [
        "SCN:plain first turn of first",
        "SCN:plain the second message",
    ]
    assert sent_to_model(mock_api, "the second message") == 1
    assert await pending(socket, repo) == []

    # The cap was raised by one cap from what was spent: still below a turn, so it asks again.
    client.say("SCN:plain the third message")
    third = (await client.wait_for("permission_request", count=2)).permission_request
    assert third.tool_name == COST_LIMIT_TOOL
    denied = await betcode(socket, repo, "permissions", "deny", third.request_id)
    assert denied.code == 0, denied.err
    error = (await client.wait_for("error")).error
    assert error.code == COST_LIMIT_NOT_SENT
    assert "not sent" in error.message
    assert len(user_inputs(client)) == 2
    assert sent_to_model(mock_api, "the third message") == 0
    assert len(client.of_kind("turn_complete")) == 2
    await client.close()


async def test_an_allow_from_the_chat_stream_sends_it_once_even_answered_twice(
    capped: InProcessDaemon, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    client = await start_session(capped.socket, workspace.repo, "chat")
    client.say("SCN:plain held")
    asked = (await client.wait_for("permission_request")).permission_request
    client.answer(asked.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    client.answer(asked.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
    await client.wait_for("turn_complete", count=2, within_s=90)
    resolved = [e.permission_resolved for e in client.of_kind("permission_resolved")]
    assert [(r.request_id, r.outcome) for r in resolved] == [(asked.request_id, "allowed")]
    assert user_inputs(client)[1:] == ["SCN:plain held"]
    assert sent_to_model(mock_api, "held") == 1
    await client.close()


async def test_the_daily_cap_counts_every_session_of_the_day(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    async with limited_daemon(
        tmp_path, claude_bin, mock_api, workspace, daily_cost_usd=TINY_USD
    ) as running:
        first = await start_session(running.socket, workspace.repo, "one")
        core = running.daemon.core
        assert core is not None
        await core.admission.refresh_reading()
        reading = core.live_state().limits()  # what the metrics read
        assert reading.spend_today_usd > TINY_USD
        assert reading.daily_cost_limit_usd == TINY_USD
        assert len(reading.session_spend_usd) == 1
        # The other session has spent nothing, but the day's spend is the daemon's.
        other = Client(running.socket, "two")
        other.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
        other.say("SCN:plain from the second session")
        asked = (await other.wait_for("permission_request")).permission_request
        assert asked.tool_name == COST_LIMIT_TOOL
        assert "the sessions have spent $" in asked.description
        assert f"allow session {other.session_id} another $0.000001 today?" in asked.description
        assert user_inputs(other) == []
        other.answer(asked.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
        await other.wait_for("turn_complete", within_s=90)
        assert user_inputs(other) == ["SCN:plain from the second session"]
        # The allowance is the second session's: the first still asks.
        first.say("SCN:plain first again")
        assert (await first.wait_for("permission_request")).permission_request.tool_name == (
            COST_LIMIT_TOOL
        )
        await first.close()
        await other.close()


async def test_a_session_s_own_cap_and_bad_values(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    mock_api: MockAnthropic,
    workspace: Workspace,
) -> None:
    socket, repo = daemon.socket, workspace.repo
    limited = await start_session(socket, repo, "limited")
    free = await start_session(socket, repo, "free")
    session_id = limited.session_id
    for bad in ("-1", "0", "nan", "inf", "much"):
        refused = await betcode(socket, repo, "sessions", "limit", session_id, "--cost-usd", bad)
        assert refused.code == 65, (bad, refused.out, refused.err)
        assert "not a positive number of USD" in refused.err
    shown = json.loads((await betcode(socket, repo, "sessions", "show", session_id, "--json")).out)
    assert shown["cost_limit_usd"] == 0

    set_cap = await betcode(
        socket, repo, "sessions", "limit", session_id[:8], "--cost-usd", str(TINY_USD), "--json"
    )
    assert set_cap.code == 0, set_cap.err
    reported = json.loads(set_cap.out)
    assert (reported["cost_limit_usd"], reported["own_limit"]) == (TINY_USD, True)
    assert reported["spent_usd"] > TINY_USD
    shown_text = (await betcode(socket, repo, "sessions", "show", session_id)).out
    assert "of its $0.0000 limit" in shown_text

    limited.say("SCN:plain over my own cap")
    assert (await limited.wait_for("permission_request")).permission_request.tool_name == (
        COST_LIMIT_TOOL
    )
    free.say("SCN:plain no cap here")
    await free.wait_for("turn_complete", count=2, within_s=90)
    assert cost_requests(free) == []

    cleared = await betcode(socket, repo, "sessions", "limit", session_id, "--clear")
    assert cleared.code == 0, cleared.err
    assert "daemon.limits.session_cost_usd" in cleared.out
    limited.say("SCN:plain after the cap is cleared")
    await limited.wait_for("turn_complete", count=2, within_s=90)
    assert user_inputs(limited)[-1] == "SCN:plain after the cap is cleared"
    await limited.close()
    await free.close()


async def test_sessions_limit_alone_shows_the_caps_and_spend_and_changes_nothing(
    capped: InProcessDaemon, workspace: Workspace
) -> None:
    socket, repo = capped.socket, workspace.repo
    client = await start_session(socket, repo, "shown")

    async def shown(*args: str) -> dict[str, object]:
        result = await betcode(socket, repo, "sessions", "limit", client.session_id, *args)
        assert result.code == 0, result.err
        data: dict[str, object] = json.loads(result.out)
        return data

    default = await shown("--json")
    assert (default["cost_limit_usd"], default["own_limit"]) == (TINY_USD, False)
    spent = default["spent_usd"]
    assert isinstance(spent, float)
    assert spent > 0
    assert default["day_spent_usd"] == spent  # the only session that spent today
    assert default["daily_limit_usd"] == 0
    await shown("--cost-usd", "5", "--json")
    own = await shown("--json")
    assert (own["cost_limit_usd"], own["own_limit"], own["spent_usd"]) == (5, True, spent)
    text = await betcode(socket, repo, "sessions", "limit", client.session_id[:8])
    assert text.out.splitlines() == [
        f"{client.session_id}: cost limit $5.0000 (its own); spent ${spent:.4f}",
        f"today, every session: spent ${spent:.4f}; "
        "daily limit none (daemon.limits.daily_cost_usd)",
    ]
    await client.close()


async def test_the_spend_and_the_waiting_request_survive_a_daemon_restart(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    daemon = limited_daemon_process(
        tmp_path, claude_bin, mock_api, workspace, f"limits.session_cost_usd={TINY_USD}"
    )
    await asyncio.to_thread(daemon.start)
    try:
        client = await start_session(daemon.socket, workspace.repo, "before")
        session_id = client.session_id
        client.say("SCN:plain waits across the restart")
        asked = (await client.wait_for("permission_request")).permission_request
        await client.close()
        assert await asyncio.to_thread(daemon.stop) == 0
        await asyncio.to_thread(daemon.start)

        [row] = await pending(daemon.socket, workspace.repo)
        assert row["request_id"] == asked.request_id
        # The spend survived: another message asks too.
        after = Client(daemon.socket, "after")
        after.converse(agent_pb2.StartConversation(session_id=session_id))
        after.say("SCN:plain asks again")
        # The waiting one is shown again to the client that attaches; the new one follows.
        while len(asked_ids := {r.request_id for r in cost_requests(after)}) < 2:
            await after.wait_for("permission_request", count=len(cost_requests(after)) + 1)
        assert asked.request_id in asked_ids
        allowed: Finished = await betcode(
            daemon.socket, workspace.repo, "permissions", "allow", asked.request_id
        )
        assert allowed.code == 0, allowed.err
        # This client was sent what no client had seen yet, the first turn's end included.
        await after.wait_for("turn_complete", count=2, within_s=90)
        assert user_inputs(after)[-1] == "SCN:plain waits across the restart"
        assert "SCN:plain asks again" not in user_inputs(after)
        assert sent_to_model(mock_api, "waits across the restart") == 1
        assert sent_to_model(mock_api, "asks again") == 0
        await after.close()
    finally:
        await asyncio.to_thread(daemon.stop)


@pytest.mark.parametrize(
    ("flag", "refusal"),
    [
        ("limits.session_cost_usd=-1", "-1 is out of range (allowed 0 to 100000)"),
        ("limits.daily_cost_usd=much", '"much" is not a number'),
        ("limits.max_running_turns=1.5", "1.5 is not a whole number"),
        ("limits.session_rss_mb=-5", "-5 is out of range"),
    ],
)
def test_bad_limit_settings_exit_65(tmp_path: Path, flag: str, refusal: str) -> None:
    done = start_foreground(tmp_path, too_old_claude(tmp_path), "--set", flag)
    assert done.returncode == EXIT_CONFIG_INVALID, done.stderr
    assert f"command line: daemon.{flag.split('=')[0]}" in done.stderr
    assert refusal in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything started
