"""daemon.limits.max_running_turns with the real CLI and the mock model (docs/LIMITS.md): with a
cap of 1, three sessions' turns run one at a time, in order; each client sees where its
message stands; a cancel takes a session's messages out of the queue."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from harness.cli_process import betcode
from harness.daemon import (
    Client,
    daemon_config,
    running_daemon,
)
from harness.environment import Workspace
from test_cost_limits import TINY_USD, limited_daemon_process, sent_to_model, user_inputs
from test_top import top_json

from betcode.config.settings import DaemonSettings, LimitSettings
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2, common_pb2

pytestmark = pytest.mark.real_cli

QUEUED = common_pb2.AgentStatus.AGENT_STATUS_QUEUED
STALLED = 'SCN:stall_first_byte {"seconds": 60} the long turn'


def queue_statuses(client: Client) -> list[str]:
    return [
        event.status_change.message
        for event in client.of_kind("status_change")
        if event.status_change.status == QUEUED
    ]


def slot(position: int, total: int) -> str:
    return f"queued: {position} of {total} waiting for a turn slot"


async def statuses(client: Client, count: int) -> None:
    """Until the client has seen `count` queue statuses."""
    while len(queue_statuses(client)) < count:
        await client.wait_for("status_change", count=len(client.of_kind("status_change")) + 1)


def open_session(socket: Path, repo: Path, client_id: str) -> Client:
    client = Client(socket, client_id)
    client.converse(agent_pb2.StartConversation(working_directory=str(repo)))
    return client


async def test_one_turn_at_a_time_in_order_with_positions_and_a_cancel(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    settings = DaemonSettings(limits=LimitSettings(max_running_turns=1))
    config = daemon_config(
        tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url), settings=settings
    )
    async with running_daemon(config) as daemon:
        first, second, third = (
            open_session(daemon.socket, workspace.repo, name) for name in ("a", "b", "c")
        )
        first.say(STALLED)
        await first.wait_for("user_input")
        second.say("SCN:plain b1")
        await second.wait_for_status(QUEUED)
        third.say("SCN:plain c1")
        await third.wait_for_status(QUEUED)
        second.say("SCN:plain b2")  # waits behind its own b1
        await statuses(second, 3)
        await statuses(third, 2)
        assert queue_statuses(second) == [slot(1, 1), slot(1, 2), slot(1, 3)]
        assert queue_statuses(third) == [slot(2, 2), slot(2, 3)]
        assert daemon.daemon.core is not None
        reading = daemon.daemon.core.live_state().limits()  # what the metrics read
        assert (reading.turns_running, reading.turns_queued) == (1, 3)

        third.send(agent_pb2.AgentRequest(cancel=agent_pb2.CancelRequest()))
        left = await third.wait_for_status(common_pb2.AgentStatus.AGENT_STATUS_IDLE)
        assert left.status_change.message == "cancelled: 1 queued message(s) not sent"
        await statuses(second, 4)
        assert queue_statuses(second)[-1] == slot(1, 2)
        # Nothing else ran while the first turn runs.
        assert user_inputs(second) == []
        assert user_inputs(third) == []

        mock_api.release_stalls()
        await first.wait_for("turn_complete", within_s=90)
        await second.wait_for("turn_complete", count=2, within_s=90)
        assert user_inputs(second) == ["SCN:plain b1", "SCN:plain b2"]
        # b2 started only once b1's turn was over (one session's own events are in order).
        kinds = [
            event.WhichOneof("event")
            for event in second.events
            if event.WhichOneof("event") in ("user_input", "turn_complete")
        ]
        assert kinds == ["user_input", "turn_complete", "user_input", "turn_complete"]
        assert user_inputs(third) == []
        assert sent_to_model(mock_api, "c1") == 0
        assert daemon.daemon.core is not None
        queue = daemon.daemon.core.admission.queue
        assert (queue.running, queue.waiting) == (0, 0)
        for client in (first, second, third):
            await client.close()


async def test_a_queued_message_waits_again_after_a_daemon_restart(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    daemon = limited_daemon_process(
        tmp_path, claude_bin, mock_api, workspace, "limits.max_running_turns=1"
    )
    await asyncio.to_thread(daemon.start)
    try:
        first = open_session(daemon.socket, workspace.repo, "a")
        second = open_session(daemon.socket, workspace.repo, "b")
        first.say(STALLED)
        await first.wait_for("user_input")
        second.say("SCN:plain queued across the restart")
        await second.wait_for_status(QUEUED)
        session_id = second.session_id
        for client in (first, second):
            await client.close()
        # The daemon stops mid-turn (its shutdown ends the stalled turn): nothing queued starts.
        assert await asyncio.to_thread(daemon.stop) == 0
        assert sent_to_model(mock_api, "queued across the restart") == 0
        mock_api.release_stalls()

        await asyncio.to_thread(daemon.start)
        again = Client(daemon.socket, "b-again")
        again.converse(agent_pb2.StartConversation(session_id=session_id))
        await again.wait_for("turn_complete", within_s=90)
        assert user_inputs(again) == ["SCN:plain queued across the restart"]
        # The model answered it: started once, by the restarted daemon.
        text = "".join(event.text_delta.text for event in again.of_kind("text_delta"))
        assert text == "Hello from the mock model."
        await again.close()
    finally:
        await asyncio.to_thread(daemon.stop)


async def test_top_and_sessions_show_a_queued_and_a_cost_waiting_session_as_such(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    """claude's own status stays idle while the daemon holds a message back: the board and
    `sessions` show where it waits, from the daemon's queue and its cost requests."""
    settings = DaemonSettings(limits=LimitSettings(max_running_turns=1))
    config = daemon_config(
        tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url), settings=settings
    )
    async with running_daemon(config) as daemon:
        socket = str(daemon.socket)
        first, second, third = (
            open_session(daemon.socket, workspace.repo, name) for name in ("a", "b", "c")
        )
        first.say(STALLED)
        await first.wait_for("user_input")
        second.say("SCN:plain b1")
        third.say("SCN:plain c1")
        await statuses(third, 1)
        await statuses(second, 2)
        states = {row["session_id"]: row["state"] for row in (await top_json(socket))["sessions"]}
        assert states[second.session_id] == "queued (1 of 2)"
        assert states[third.session_id] == "queued (2 of 2)"
        assert states[first.session_id] != "idle"
        shown = await betcode(daemon.socket, tmp_path, "sessions", "show", second.session_id)
        assert "queued (1 of 2)" in shown.out, shown
        listed = await betcode(daemon.socket, tmp_path, "sessions", "list")
        assert "queued (2 of 2)" in listed.out, listed

        mock_api.release_stalls()
        await third.wait_for("turn_complete", within_s=90)
        assert daemon.daemon.core is not None
        await daemon.daemon.core.admission.set_session_limit(third.session_id, TINY_USD)
        third.say("SCN:plain c2")
        await third.wait_for("permission_request")
        states = {row["session_id"]: row["state"] for row in (await top_json(socket))["sessions"]}
        assert states[third.session_id] == "waiting: cost limit"
        assert states[second.session_id] == "idle"
        shown = await betcode(daemon.socket, tmp_path, "sessions", "show", third.session_id)
        assert "waiting: cost limit" in shown.out, shown
        for client in (first, second, third):
            await client.close()
