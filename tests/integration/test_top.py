"""`betcode top` against a real daemon running the real CLI: the live table (driven with
Textual's Pilot) and `--json` show a session's state, clients, pending approval, tokens and
cost per hour over the last 10 minutes."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from harness.daemon import Client, Decision, InProcessDaemon
from harness.environment import Workspace

from betcode.cli.connection import DaemonClient, resolve_daemon_address
from betcode.cli.top.app import TopApp
from betcode.cli.top_cmd import sessions_overview
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

TOOL_PROMPT = 'SCN:tool_bash {"command": "python3 -c \\"print(6 * 7)\\""} multiply'


async def top_json(socket: str) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "betcode.cli.main", "top", "--json", "--socket", socket,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    loaded: dict[str, Any] = json.loads(out)
    return loaded


async def test_top_shows_a_waiting_approval_then_the_turns_cost(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    client = clients("watched")
    client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await client.wait_for("session_info")
    client.say(TOOL_PROMPT)
    request = (await client.wait_for("permission_request")).permission_request

    async with await DaemonClient.connect(resolve_daemon_address(str(daemon.socket))) as dc:
        app = TopApp(lambda: sessions_overview(dc), interval=0.2)
        async with app.run_test() as pilot:

            async def until(reached: Callable[[], bool], what: str) -> None:
                for _ in range(300):
                    if reached():
                        return
                    await pilot.pause(0.1)
                raise AssertionError(f"top never showed {what}: {app.rows}")

            await until(lambda: bool(app.rows) and app.rows[0].pending_approvals == 1, "approval")
            row = app.rows[0]
            assert row.session_id == client.session_id
            assert (row.clients, row.where) == (1, str(workspace.repo))
            assert row.state == "executing_tool"  # waiting for the approval

            client.answer(request.request_id, Decision.PERMISSION_DECISION_ALLOW_ONCE)
            await client.wait_for("turn_complete")
            usage = client.of_kind("usage")[-1].usage
            await until(lambda: app.rows[0].input_tokens > 0, "the turn's tokens")
            row = app.rows[0]
            assert (row.state, row.pending_approvals) == ("idle", 0)
            assert row.input_tokens == usage.input_tokens
            assert row.cost_usd == pytest.approx(usage.cost_usd)
            assert row.cost_per_hour_usd == pytest.approx(usage.cost_usd * 6)
            table = app.query_one("DataTable")
            assert table.row_count == 1  # type: ignore[attr-defined]
            await pilot.press("q")

    snapshot = await top_json(str(daemon.socket))
    (session,) = snapshot["sessions"]
    assert session["session_id"] == client.session_id
    assert session["clients"] == 1
    assert session["cost_per_hour_usd"] == pytest.approx(usage.cost_usd * 6)
    assert "1 sessions" in str(snapshot["summary"])
