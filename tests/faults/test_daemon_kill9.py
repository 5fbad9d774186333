"""kill -9 of the DAEMON and of its sessions' holders (claude is orphaned as a direct child of
the daemon would be, and no session can be re-attached: test_live_restore has the sessions
that survive) mid-stream, then a restart on the same data dir and socket path: startup
reconciliation (which ends the cut-off turn in the log: an error, then IDLE), a full
replay with contiguous sequence numbers, and the conversation resumed with --resume. Once with
a fake claude flooding, once with the real CLI and the mock.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import stat
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.conditions import until
from harness.daemon import Client, DaemonProcess, accepts_connections
from harness.environment import Workspace
from harness.fake_claude import FakeClaude, resume_id
from harness.mock_model import conversation_sent_with
from harness.restarts import Restarts

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.v1 import agent_pb2, common_pb2

TEXT_TURN = [{"do": "text", "text": "back again"}]


@dataclass(frozen=True)
class Stored:
    """What a daemon committed for one session, read straight from its database."""

    status: str
    claude_session_id: str | None
    input_lock_client: str | None
    events: list[tuple[int, bytes]]  # (event seq, serialized AgentEvent)
    event_sources: set[int]  # the line seqs the events were translated from
    line_seqs: list[int]
    connected_clients: int


def read_stored(database: Path, session_id: str) -> Stored:
    with closing(sqlite3.connect(database)) as db:
        status, claude_session_id, lock = db.execute(
            "SELECT status, claude_session_id, input_lock_client FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
        events = db.execute(
            "SELECT sequence, payload, message_sequence FROM events WHERE session_id = ? "
            "ORDER BY sequence",
            (session_id,),
        ).fetchall()
        lines = db.execute(
            "SELECT sequence FROM messages WHERE session_id = ? ORDER BY sequence", (session_id,)
        ).fetchall()
        (clients,) = db.execute("SELECT COUNT(*) FROM connected_clients").fetchone()
    return Stored(
        status=status,
        claude_session_id=claude_session_id,
        input_lock_client=lock,
        events=[(seq, bytes(payload)) for seq, payload, _ in events],
        event_sources={source for _, _, source in events if source is not None},
        line_seqs=[seq for (seq,) in lines],
        connected_clients=clients,
    )


def leave_client_rows(database: Path, session_id: str) -> None:
    """Make sure the killed daemon left a connected client holding the input lock in SQLite
    (it may record the client itself; the lock it may keep in memory only)."""
    with closing(sqlite3.connect(database)) as db, db:  # commit, then close
        now = time.time()
        db.execute(
            "INSERT OR REPLACE INTO connected_clients (client_id, session_id, client_type, "
            "has_input_lock, connected_at, last_heartbeat) VALUES ('reader', ?, 'cli', 1, ?, ?)",
            (session_id, now, now),
        )
        db.execute("UPDATE sessions SET input_lock_client = 'reader' WHERE id = ?", (session_id,))


def contiguous(seqs: list[int]) -> bool:
    return seqs == list(range(1, len(seqs) + 1))


@dataclass
class Restarted:
    session_id: str
    before: Stored  # committed by the killed daemon
    after: Stored  # after the restart's reconciliation
    observer: Client  # a ResumeSession(from 0) stream on the restarted daemon


async def kill_mid_stream_and_restart(
    daemon: DaemonProcess,
    open_client: Callable[[str], Client],
    cwd: Path,
    prompt: str,
    deltas_before_kill: int,
) -> Restarted:
    """Start a turn, kill -9 the daemon once `deltas_before_kill` text deltas arrived, restart
    it on the same data dir and socket, and check what survived; returns a replaying observer."""
    reader = open_client("reader")
    reader.converse(agent_pb2.StartConversation(working_directory=str(cwd)))
    await reader.wait_for("session_info")
    session_id = reader.session_id
    reader.say(prompt)
    await reader.wait_for("text_delta", deltas_before_kill)
    await asyncio.to_thread(lambda: daemon.kill9(holders_too=True))
    database = daemon.root / "data" / "daemon.db"

    before = read_stored(database, session_id)
    assert before.status == "active"  # killed mid-turn
    assert "turn_complete" not in {e.WhichOneof("event") for e in reader.events}
    stored = dict(before.events)
    assert contiguous(list(stored)), "committed events have a gap"
    assert contiguous(before.line_seqs), "committed lines have a gap"
    assert before.event_sources <= set(before.line_seqs)  # a line and its events commit together
    # Publishing follows the commit: whatever the client was shown is stored, byte for byte.
    assert contiguous(reader.sequences)
    assert all(stored[e.sequence] == e.SerializeToString() for e in reader.events if e.sequence)

    leave_client_rows(database, session_id)
    assert stat.S_ISSOCK(os.lstat(daemon.socket).st_mode)  # the dead daemon's socket file
    await asyncio.to_thread(daemon.start)

    after = read_stored(database, session_id)
    assert (after.status, after.input_lock_client, after.connected_clients) == ("idle", None, 0)
    cut = len(before.events)
    assert after.events[:cut] == before.events  # nothing lost
    # ... and the interrupted turn ended once, under the next seqs: the log ends IDLE, with
    # the input lock nobody's (its holder's stream died with the daemon).
    ending = [agent_pb2.AgentEvent.FromString(payload) for _, payload in after.events[cut:]]
    assert [(e.sequence, e.WhichOneof("event")) for e in ending] == [
        (cut + 1, "error"),
        (cut + 2, "status_change"),
        (cut + 3, "input_lock"),
    ]
    assert "turn interrupted by a daemon restart" in ending[0].error.message
    assert ending[1].status_change.status == common_pb2.AGENT_STATUS_IDLE
    assert ending[2].input_lock.holder_client_id == ""

    observer = open_client("observer")
    observer.resume(session_id, from_sequence=0)
    final = len(after.events)
    await observer.wait_for_sequence(final)
    replayed = [e for e in observer.events if e.sequence <= final]
    assert [(e.sequence, e.SerializeToString()) for e in replayed] == after.events
    return Restarted(session_id, before, after, observer)


async def resume_with_a_new_message(restarted: Restarted, writer: Client, text: str) -> None:
    """A new message in the session is answered; every stream stays contiguous."""
    writer.converse(agent_pb2.StartConversation(session_id=restarted.session_id))
    writer.say(text)
    await writer.wait_for("turn_complete", within_s=60)
    # What the writer had by then: more may come to it meanwhile (the IDLE after the turn),
    # which the observer need not have yet.
    seen = list(writer.sequences)
    final = max(seen)
    await restarted.observer.wait_for_sequence(final)
    assert contiguous(seen)
    assert seen == restarted.observer.sequences[: len(seen)]
    assert final > len(restarted.after.events)


def new_text(client: Client, after: int) -> str:
    return "".join(e.text_delta.text for e in client.of_kind("text_delta") if e.sequence > after)


# The daemon runs on uvloop by default; asyncio's own loop stays a supported fallback.
@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
async def test_kill9_of_the_daemon_mid_flood_then_replay_and_resume(
    tmp_path: Path, restarts: Restarts, event_loop: str
) -> None:
    fake = FakeClaude(tmp_path)
    flood = {"turns": [[{"do": "flood", "lines": 20_000, "text": "f", "rate": 4000}]]}
    binary = fake.binary([flood, {"turns": [TEXT_TURN]}])
    repo = tmp_path / "repo"
    repo.mkdir()
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "BETCODE_EVENT_LOOP": event_loop,
    }
    daemon = await restarts.start(binary, environ)
    await until(lambda: f"(event loop: {event_loop})" in daemon.log_path.read_text())
    restarted = await kill_mid_stream_and_restart(daemon, restarts.client, repo, "flood", 500)
    assert len(restarted.before.events) < 20_000  # the flood was cut off
    writer = restarts.client("writer")
    await resume_with_a_new_message(restarted, writer, "are you back?")
    assert new_text(writer, len(restarted.before.events)) == "back again"
    first, second = fake.starts()
    assert resume_id(first) is None
    assert restarted.before.claude_session_id is not None
    assert resume_id(second) == restarted.before.claude_session_id


def test_a_dead_daemons_socket_file_does_not_count_as_listening(tmp_path: Path) -> None:
    path = tmp_path / "daemon.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(os.fspath(path))
        listener.listen()
        assert accepts_connections(path)
    # Closed without unlinking, as a kill -9 leaves it: the file is there, nobody answers.
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    assert not accepts_connections(path)
    assert not accepts_connections(tmp_path / "missing.sock")


@pytest.mark.real_cli
async def test_kill9_of_the_daemon_mid_turn_with_the_real_cli(
    restarts: Restarts, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    daemon = await restarts.start(claude_bin, workspace.env(mock_api.base_url))
    prompt = 'SCN:slow {"words": 400, "delay": 0.01} kill-marker-7f3a'
    restarted = await kill_mid_stream_and_restart(
        daemon, restarts.client, workspace.repo, prompt, 20
    )
    writer = restarts.client("writer")
    await resume_with_a_new_message(restarted, writer, "SCN:plain are you back?")
    assert "Hello from the mock model." in new_text(writer, len(restarted.before.events))
    [claude] = [
        argv
        for argv in daemon.child_command_lines()
        if "--resume" in argv and not any(part.endswith("holder.py") for part in argv)
    ]
    assert restarted.before.claude_session_id is not None
    assert resume_id(claude) == restarted.before.claude_session_id
    # --resume gave the new process the interrupted conversation.
    assert "kill-marker-7f3a" in conversation_sent_with(mock_api, "are you back?")
