"""`betcode top` against a real daemon running the real CLI: the board (driven with Textual's
Pilot) shows a session's state, place, clients, pending approval, tokens and cost per hour
over the last 10 minutes, and its keys allow, deny, cancel, open, delete and filter; `--json`
gives the same rows."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from harness.daemon import Client, InProcessDaemon
from harness.environment import Workspace
from textual.pilot import Pilot

from betcode.cli.connection import resolve_daemon_address
from betcode.cli.top.app import TopApp
from betcode.cli.top.source import DaemonBoard
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'
SLOW_PROMPT = 'SCN:slow {"words": 400, "delay": 0.05} working'


async def top_json(socket: str, *flags: str) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "betcode.cli.main", "top", "--json", *flags, "--socket", socket,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    loaded: dict[str, Any] = json.loads(out)
    return loaded


@pytest.fixture
async def board(daemon: InProcessDaemon) -> AsyncIterator[DaemonBoard]:
    made = DaemonBoard(resolve_daemon_address(str(daemon.socket)))
    yield made
    await made.close()


async def until(pilot: Pilot[Any], reached: Callable[[], bool], what: str) -> None:
    for _ in range(300):
        if reached():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"top never showed {what}: {pilot.app.rows}")  # type: ignore[attr-defined]


async def chatting(clients: Callable[[str], Client], workspace: Workspace, name: str) -> Client:
    client = clients(name)
    client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await client.wait_for("session_info")
    return client


async def test_y_allows_the_waiting_request_then_the_turns_cost_shows(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    board: DaemonBoard,
) -> None:
    client = await chatting(clients, workspace, "watched")
    client.say(TOOL_PROMPT)
    await client.wait_for("permission_request")

    app = TopApp(board, interval=0.2)
    async with app.run_test() as pilot:
        await until(pilot, lambda: bool(app.shown) and app.shown[0].pending_approvals == 1, "it")
        row = app.shown[0]
        assert row.session_id == client.session_id
        assert (row.clients, row.where, row.live) == (1, str(workspace.repo), True)
        assert row.state == "executing_tool"  # waiting for the approval

        await pilot.press("y")
        await client.wait_for("turn_complete")
        resolved = client.of_kind("permission_resolved")[-1].permission_resolved
        assert resolved.outcome == "allowed"
        usage = client.of_kind("usage")[-1].usage
        await until(pilot, lambda: app.shown[0].input_tokens > 0, "the turn's tokens")
        row = app.shown[0]
        assert (row.state, row.pending_approvals) == ("idle", 0)
        assert row.input_tokens == usage.input_tokens
        assert row.cost_usd == pytest.approx(usage.cost_usd)
        assert row.cost_per_hour_usd == pytest.approx(usage.cost_usd * 6)
        await pilot.press("q")

    snapshot = await top_json(str(daemon.socket))
    (session,) = snapshot["sessions"]
    assert session["session_id"] == client.session_id
    assert session["clients"] == 1
    assert session["cost_per_hour_usd"] == pytest.approx(usage.cost_usd * 6)
    assert "1 session ·" in str(snapshot["summary"])


async def test_n_denies_and_c_cancels_the_turn(
    clients: Callable[[str], Client], workspace: Workspace, board: DaemonBoard
) -> None:
    client = await chatting(clients, workspace, "denied")
    client.say(TOOL_PROMPT)
    await client.wait_for("permission_request")
    app = TopApp(board, interval=0.2)
    async with app.run_test() as pilot:
        await until(pilot, lambda: bool(app.shown) and app.shown[0].pending_approvals == 1, "it")
        await pilot.press("n")
        resolved = (await client.wait_for("permission_resolved")).permission_resolved
        assert resolved.outcome == "denied"
        await client.wait_for("turn_complete")

        client.say(SLOW_PROMPT)
        await client.wait_for("text_delta", count=len(client.of_kind("text_delta")) + 3)
        await pilot.press("c")
        await client.wait_for("turn_complete", count=2)
        status = app.query_one("#status")
        await until(pilot, lambda: "turn cancelled" in str(status.render()), "the cancel")
        assert len(client.of_kind("text_delta")) < 400  # stopped well before its end
        await pilot.press("q")


async def test_live_only_by_default_all_with_a_filter_enter_opens_and_x_twice_deletes(
    daemon: InProcessDaemon,
    clients: Callable[[str], Client],
    workspace: Workspace,
    board: DaemonBoard,
) -> None:
    client = await chatting(clients, workspace, "attached")
    manager = daemon.daemon.sessions
    assert manager is not None
    resting = await manager.create(working_directory=str(workspace.repo), name="old-task")

    app = TopApp(board, interval=0.2)
    async with app.run_test() as pilot:
        await until(pilot, lambda: bool(app.rows), "the sessions")
        assert [row.session_id for row in app.shown] == [client.session_id]
        await pilot.press("a")
        assert {row.session_id for row in app.shown} == {client.session_id, resting.id}
        await pilot.press("slash", *"old-t", "enter")
        assert [row.session_id for row in app.shown] == [resting.id]

        await pilot.press("x")
        assert "press x again" in str(app.query_one("#status").render())
        await pilot.press("x")
        await until(pilot, lambda: resting.id not in {r.session_id for r in app.rows}, "delete")
        assert (await manager.list()).total == 1

        await pilot.press("slash", *["backspace"] * 5, "enter")
        await until(pilot, lambda: bool(app.shown), "the session left")
        await pilot.press("enter")
    assert app.return_value == client.session_id  # `betcode top` then opens its chat
