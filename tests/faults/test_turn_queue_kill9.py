"""kill -9 of the daemon as a queued message (daemon.limits.max_running_turns, docs/LIMITS.md)
starts its turn, just before and just after its line is committed, then a restart on the same
data dir: the message is neither lost nor sent twice. The queued row goes in the transaction
that records the line, so the killed daemon left exactly one of the two."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from harness import kill_point
from harness.daemon import Client, DaemonProcess, daemon_process_env
from harness.environment import Workspace

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2, common_pb2

pytestmark = pytest.mark.real_cli

QUEUED = common_pb2.AgentStatus.AGENT_STATUS_QUEUED
STALLED = 'SCN:stall_first_byte {"seconds": 60} the long turn'
MARKER = "handed-over-marker"


def stored(database: Path, session_id: str) -> tuple[list[str], int]:
    """The session's queued messages and how many of its recorded user lines hold MARKER."""
    with closing(sqlite3.connect(database)) as db:
        queued = [
            text
            for (text,) in db.execute(
                "SELECT text FROM queued_messages WHERE session_id = ? ORDER BY id", (session_id,)
            )
        ]
        (lines,) = db.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id = ? AND direction = 'in' "
            "AND message_type = 'user' AND payload LIKE ?",
            (session_id, f"%{MARKER}%"),
        ).fetchone()
    return queued, lines


def sent_to_model(mock_api: MockAnthropic) -> int:
    """The model's requests whose conversation holds the queued message (one per sending: the
    message is a turn's last and no turn follows it)."""
    return sum(
        MARKER in json.dumps((request.body or {}).get("messages", []))
        for request in mock_api.message_requests
    )


def open_session(socket: Path, repo: Path, client_id: str) -> Client:
    client = Client(socket, client_id)
    client.converse(agent_pb2.StartConversation(working_directory=str(repo)))
    return client


@pytest.mark.parametrize("point", kill_point.POINTS)
@pytest.mark.timeout(240)
async def test_a_queued_message_killed_at_its_hand_over_is_sent_exactly_once(
    point: str, tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    root = tmp_path / "daemon"
    root.mkdir()
    environ = daemon_process_env(root, claude_bin, workspace.env(mock_api.base_url))
    daemon = DaemonProcess(root, environ, args=("--set", "limits.max_running_turns=1"))
    default_launcher = daemon.launcher
    daemon.launcher = (kill_point.__file__, point, MARKER, "--")
    await asyncio.to_thread(daemon.start)
    try:
        first = open_session(daemon.socket, workspace.repo, "a")
        second = open_session(daemon.socket, workspace.repo, "b")
        first.say(STALLED)
        await first.wait_for("user_input")
        second.say(f"SCN:plain {MARKER}")
        await second.wait_for_status(QUEUED)
        session_id = second.session_id
        # The long turn ends; the queued message's turn starts, and the daemon dies there.
        mock_api.release_stalls()
        await asyncio.to_thread(daemon.wait_killed, 90)
        for client in (first, second):
            await client.close()
        database = root / "data" / "daemon.db"
        queued, lines = await asyncio.to_thread(stored, database, session_id)
        if point == "before-commit":
            assert (queued, lines) == ([f"SCN:plain {MARKER}"], 0)  # still queued, not lost
        else:
            assert (queued, lines) == ([], 1)  # recorded, and queued no more
        assert sent_to_model(mock_api) == 0

        daemon.launcher = default_launcher
        await asyncio.to_thread(daemon.start)
        again = Client(daemon.socket, "b-again")
        again.converse(agent_pb2.StartConversation(session_id=session_id))
        if point == "before-commit":  # queued again by the restarted daemon, and sent
            await again.wait_for("turn_complete", within_s=90)
        else:  # the restarted daemon serves; a later message runs and nothing comes again
            again.say("SCN:plain and then")
            await again.wait_for("turn_complete", within_s=90)
        assert await asyncio.to_thread(stored, database, session_id) == ([], 1)
        assert sent_to_model(mock_api) == (1 if point == "before-commit" else 0)
        await again.close()
    finally:
        await asyncio.to_thread(daemon.stop)
