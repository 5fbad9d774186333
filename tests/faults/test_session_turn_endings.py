"""Every way a turn can end without its `result` ends it visibly, on a real daemon with a fake
claude: claude exiting mid-turn (any exit code), a crash restart (the session says IDLE again
once claude runs), and a message that never reaches claude. No client is left THINKING."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from harness.conditions import until
from harness.daemon import Client
from test_daemon_faults import FAST, TEXT_TURN, FakeWorld, sequences, statuses

from betcode.claude.backoff import SupervisorPolicy
from betcode.claude.supervisor import SupervisorState
from betcode.v1 import agent_pb2, common_pb2

Status = common_pb2.AgentStatus
IDLE, THINKING = Status.AGENT_STATUS_IDLE, Status.AGENT_STATUS_THINKING
SLOW = {"turns": [[{"do": "flood", "lines": 400, "text": "x", "rate": 100}]]}


def last_status(client: Client) -> int:
    return statuses(client)[-1]


async def test_claude_exiting_0_mid_turn_ends_the_turn(tmp_path: Path) -> None:
    world = FakeWorld(tmp_path)
    cut_short = {"turns": [[{"do": "text", "text": "half"}, {"do": "exit", "code": 0}]]}
    async with world.daemon([cut_short, {"turns": [TEXT_TURN]}]) as daemon:
        client = world.client("one")
        await client.wait_for("session_info")
        client.say("start")
        error = await client.wait_for("error")
        ended = await client.wait_for_status(IDLE, error.sequence)
        assert error.error.code == "SUBPROCESS_CRASHED"
        assert "claude exited with code 0 during the turn" in error.error.message
        assert ended.sequence == error.sequence + 1
        assert daemon.sessions is not None
        session = daemon.sessions.live[0]
        assert not session.turn_active
        assert session.supervisor.state is SupervisorState.IDLE  # exit 0 is no crash
        client.say("again")
        await client.wait_for("turn_complete")
    assert len(world.starts()) == 2
    assert sequences(client) == list(range(1, len(sequences(client)) + 1))


async def test_an_idle_process_reaped_with_exit_0_is_no_error(tmp_path: Path) -> None:
    world = FakeWorld(tmp_path)
    reaping = SupervisorPolicy(backoff_initial=0.05, kill_grace_seconds=0.3, idle_reap_seconds=0.2)
    async with world.daemon([{"turns": [TEXT_TURN]}], policy=reaping) as daemon:
        client = world.client("one")
        await client.wait_for("session_info")
        client.say("hello")
        await client.wait_for("turn_complete")
        assert daemon.sessions is not None
        session = daemon.sessions.live[0]
        await until(lambda: session.supervisor.state is SupervisorState.IDLE)
        client.say("and again")  # resumes; its events follow the reaping's (if any)
        done = await client.wait_for("turn_complete", 2)
        await client.wait_for_status(IDLE, done.sequence)
    assert len(world.starts()) == 2
    assert client.of_kind("error") == []
    assert last_status(client) == IDLE


async def test_after_a_crash_restart_the_session_is_idle_again_without_a_prompt(
    tmp_path: Path,
) -> None:
    world = FakeWorld(tmp_path)
    async with world.daemon([SLOW, {"turns": [TEXT_TURN]}]) as daemon:
        client = world.client("one")
        await client.wait_for("session_info")
        client.say("start a long turn")
        await client.wait_for("text_delta", 5)
        assert daemon.sessions is not None
        session = daemon.sessions.live[0]
        pid = session.supervisor.pid
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        restarting = await client.wait_for_status(Status.AGENT_STATUS_RESTARTING)
        running = await client.wait_for_status(IDLE, restarting.sequence)
        assert running.status_change.message == "claude is running again"
        assert session.supervisor.state is SupervisorState.RUNNING
        assert session.supervisor.pid != pid
        assert not session.turn_active
    ended = [e for e in client.events if 0 < e.sequence < restarting.sequence]
    assert [e.WhichOneof("event") for e in ended[-2:]] == ["error", "status_change"]
    assert ended[-1].status_change.status == IDLE  # the cut-off turn ended at the exit


async def test_a_message_sent_while_claude_restarts_waits_for_it_thinking(
    tmp_path: Path,
) -> None:
    world = FakeWorld(tmp_path)
    slow_restart = SupervisorPolicy(
        backoff_initial=1.0, backoff_max=1.0, kill_grace_seconds=0.3, idle_reap_seconds=None
    )
    async with world.daemon([SLOW, {"turns": [TEXT_TURN]}], policy=slow_restart) as daemon:
        client = world.client("one")
        await client.wait_for("session_info")
        client.say("start a long turn")
        await client.wait_for("text_delta", 5)
        assert daemon.sessions is not None
        session = daemon.sessions.live[0]
        assert session.supervisor.pid is not None
        os.killpg(session.supervisor.pid, signal.SIGKILL)
        restarting = await client.wait_for_status(Status.AGENT_STATUS_RESTARTING)
        client.say("are you back?")  # waits for the restart
        thinking = await client.wait_for_status(THINKING, restarting.sequence)
        done = await client.wait_for("turn_complete")
    assert thinking.sequence < done.sequence
    # From the message on, the session stays THINKING until the answer: never IDLE between.
    after_message = [
        e.status_change.status
        for e in client.of_kind("status_change")
        if thinking.sequence <= e.sequence < done.sequence
    ]
    assert set(after_message) == {THINKING}, statuses(client)


async def test_a_message_that_cannot_reach_claude_ends_its_turn(tmp_path: Path) -> None:
    world = FakeWorld(tmp_path)
    async with world.daemon([{"turns": [TEXT_TURN]}], policy=FAST) as daemon:
        client = world.client("one")
        await client.wait_for("session_info")
        # claude cannot start any more (a working directory gone is refused before the
        # message is stored: test_session_directory_gone.py)
        shutil.rmtree(world.fake.root / "fake")
        client.say("hello?")
        await client.wait_for("error", 2)
        # The sender is told why (an error for it alone, not stored: sequence 0) ...
        (refused,) = [e.error for e in client.of_kind("error") if e.sequence == 0]
        assert "No such file or directory" in refused.message
        ended = await client.wait_for_status(IDLE)
        assert daemon.sessions is not None
        assert not daemon.sessions.live[0].turn_active
        # The stream goes on, and a cancel finds no turn to cancel.
        cancelled = await client.stub.CancelTurn(
            agent_pb2.CancelTurnRequest(session_id=client.session_id)
        )
        assert not cancelled.was_active
    stored = [e.WhichOneof("event") for e in client.events if e.sequence]
    assert stored[-4:] == ["user_input", "status_change", "error", "status_change"]
    # ... and every client sees the turn end.
    (shown,) = [e.error for e in client.of_kind("error") if e.sequence]
    assert "did not reach claude" in shown.message
    assert ended.sequence == max(sequences(client))
    assert world.starts() == []
