"""Sessions outlive the daemon: each claude runs under its holder (claude/holder), so a daemon
killed with SIGKILL, or stopped with --keep-sessions, leaves the turn running; the next daemon
re-attaches and ingests what claude printed meanwhile, in order, exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from harness.conditions import until
from harness.daemon import Client, DaemonProcess
from harness.environment import Workspace
from harness.fake_claude import FakeClaude
from harness.restarts import Restarts, gone, spooled_end

from betcode.daemon import KEEP_SESSIONS_SIGNAL
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.permissions.orphans import NOTE_PREFIX
from betcode.v1 import agent_pb2, common_pb2

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@dataclass(frozen=True)
class Stored:
    line_seqs: list[int]
    events: list[tuple[int, bytes]]
    user_lines: list[str]  # what the daemon wrote to claude as user messages
    committed_offset: int


def read_stored(database: Path, session_id: str) -> Stored:
    with closing(sqlite3.connect(database)) as db:
        lines = db.execute(
            "SELECT sequence, direction, message_type, payload FROM messages "
            "WHERE session_id = ? ORDER BY sequence",
            (session_id,),
        ).fetchall()
        events = db.execute(
            "SELECT sequence, payload FROM events WHERE session_id = ? ORDER BY sequence",
            (session_id,),
        ).fetchall()
        offset = db.execute(
            "SELECT stdout_offset FROM holder_positions WHERE session_id = ?", (session_id,)
        ).fetchone()
    return Stored(
        line_seqs=[seq for seq, *_ in lines],
        events=[(seq, bytes(payload)) for seq, payload in events],
        user_lines=[str(text) for _, way, kind, text in lines if (way, kind) == ("in", "user")],
        committed_offset=0 if offset is None else offset[0],
    )


def resumes_audited(database: Path, session_id: str) -> int:
    with closing(sqlite3.connect(database)) as db:
        (count,) = db.execute(
            "SELECT COUNT(*) FROM audit_log WHERE event_type = 'session_resume' AND session_id = ?",
            (session_id,),
        ).fetchone()
    return int(count)


def contiguous(seqs: list[int]) -> bool:
    return seqs == list(range(1, len(seqs) + 1))


def assert_replayed_once(observer: Client, stored: Stored) -> None:
    """The observer's stream is the stored log, each event once, seqs contiguous from 1."""
    assert contiguous(observer.sequences)
    assert contiguous(stored.line_seqs)
    # Compared as messages: a map (a tool's input) may serialize in another order here.
    assert [e for e in observer.events if e.sequence] == [
        agent_pb2.AgentEvent.FromString(payload)
        for _, payload in stored.events[: len(observer.sequences)]
    ]
    errors = [e.error.code for e in observer.of_kind("error")]
    assert "TURN_INTERRUPTED" not in errors


async def start_real_session(
    restarts: Restarts, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> tuple[DaemonProcess, Client]:
    """A daemon running the real CLI against the mock model, and a client in a new session."""
    daemon = await restarts.start(claude_bin, workspace.env(mock_api.base_url))
    reader = restarts.client("reader")
    reader.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await reader.wait_for("session_info")
    return daemon, reader


@pytest.mark.real_cli
async def test_a_turn_streaming_when_the_daemon_is_sigkilled_goes_on_under_the_same_claude(
    restarts: Restarts, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    daemon, reader = await start_real_session(restarts, claude_bin, mock_api, workspace)
    session_id = reader.session_id
    reader.say('SCN:slow {"words": 300, "delay": 0.01}')
    await reader.wait_for("text_delta", 20)
    [holder] = restarts.holders()
    claude = psutil.Process(holder["claude_pid"])

    await asyncio.to_thread(daemon.kill9)
    committed = read_stored(restarts.database, session_id).committed_offset
    # claude goes on with no daemon: what it prints waits in the holder's spool.
    await until(lambda: spooled_end(holder["dir"]) > committed + 4096, within_s=30)
    await asyncio.to_thread(daemon.start)

    observer = restarts.client("observer")
    observer.resume(session_id, from_sequence=0)
    await observer.wait_for("turn_complete", within_s=60)
    stored = read_stored(restarts.database, session_id)
    assert_replayed_once(observer, stored)
    words = "".join(e.text_delta.text for e in observer.of_kind("text_delta"))
    assert words == " ".join(f"word{n}" for n in range(1, 301))  # no delta lost or repeated
    assert stored.committed_offset > committed  # lines printed meanwhile were ingested
    # The same claude process finished the turn; no other was started.
    assert claude.is_running()
    assert [h["claude_pid"] for h in restarts.holders()] == [claude.pid]
    assert len(mock_api.message_requests) == 1
    assert resumes_audited(restarts.database, session_id) == 0  # re-attached, not resumed
    done = observer.of_kind("turn_complete")[0].sequence
    await observer.wait_for_status(common_pb2.AGENT_STATUS_IDLE, after=done)


@pytest.mark.real_cli
async def test_a_permission_pending_across_a_daemon_sigkill_is_answered_to_the_same_claude(
    restarts: Restarts,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    tmp_path: Path,
) -> None:
    daemon, reader = await start_real_session(restarts, claude_bin, mock_api, workspace)
    runs = tmp_path / "runs.txt"
    session_id = reader.session_id
    command = json.dumps({"command": f"echo ran >> {runs}"})
    reader.say(f"SCN:tool_bash {command}")
    request = (await reader.wait_for("permission_request")).permission_request
    [holder] = restarts.holders()

    await asyncio.to_thread(daemon.kill9)
    await asyncio.to_thread(daemon.start)
    answered = await restarts.cli("permissions", "allow", request.request_id)
    assert answered.returncode == 0, answered.stderr

    observer = restarts.client("observer")
    observer.resume(session_id, from_sequence=0)
    await observer.wait_for("turn_complete", within_s=60)
    assert runs.read_text() == "ran\n"  # the tool ran, once
    stored = read_stored(restarts.database, session_id)
    assert_replayed_once(observer, stored)
    assert not [line for line in stored.user_lines if NOTE_PREFIX in line]  # no resume note
    assert [h["claude_pid"] for h in restarts.holders()] == [holder["claude_pid"]]
    assert psutil.Process(holder["claude_pid"]).is_running()


def session_grants(database: Path, session_id: str) -> list[tuple[str, str | None]]:
    with closing(sqlite3.connect(database)) as db:
        rows = db.execute(
            "SELECT tool_name, pattern FROM permission_grants WHERE session_id = ? ORDER BY id",
            (session_id,),
        ).fetchall()
    return [(str(tool), pattern) for tool, pattern in rows]


@pytest.mark.real_cli
async def test_allowed_for_the_session_after_a_daemon_sigkill_as_claude_suggested(
    restarts: Restarts, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    daemon, reader = await start_real_session(restarts, claude_bin, mock_api, workspace)
    session_id = reader.session_id
    notes = workspace.repo / "notes.txt"
    reader.say("SCN:tool_write " + json.dumps({"file_path": str(notes), "content": "once\n"}))
    request = (await reader.wait_for("permission_request")).permission_request

    await asyncio.to_thread(daemon.kill9)
    await asyncio.to_thread(daemon.start)  # the request waits on the same claude again
    answered = await restarts.cli("permissions", "allow", "--session-wide", request.request_id)
    assert answered.returncode == 0, answered.stderr

    observer = restarts.client("observer")
    observer.resume(session_id, from_sequence=0)
    await observer.wait_for("turn_complete", within_s=60)
    assert notes.read_text() == "once\n"
    # claude suggested accepting edits for the session (its permission_suggestions,
    # docs/PROTOCOL.md#permission-requests): the grant covers the project's files, not just this one
    # file.
    assert session_grants(restarts.database, session_id) == [("Edit", "./**")]


FLOOD_UUID = "00000000-0000-4000-9000-"


def flood_numbers(database: Path, session_id: str) -> list[int]:
    """The number of every flood line stored, in line-seq order (the fake numbers them)."""
    with closing(sqlite3.connect(database)) as db:
        payloads = db.execute(
            "SELECT payload FROM messages WHERE session_id = ? AND direction = 'out' "
            "ORDER BY sequence",
            (session_id,),
        ).fetchall()
    return [
        int(json.loads(payload)["uuid"].rsplit("-", 1)[1])
        for (payload,) in payloads
        if FLOOD_UUID in payload
    ]


def endless_flood(tmp_path: Path) -> tuple[FakeClaude, Path, Path]:
    """A fake claude whose one turn floods (100 lines/s) until the returned file exists."""
    stop_file = tmp_path / "stop-flood"
    fake = FakeClaude(tmp_path)
    flood = {"do": "flood", "lines": 0, "text": "r", "rate": 100, "until_file": str(stop_file)}
    return fake, fake.binary([{"turns": [[flood]]}]), stop_file


@pytest.mark.timeout(400)  # twenty daemon starts: about a minute on a busy 2-CPU machine
async def test_twenty_daemon_restarts_during_one_turn_lose_and_repeat_nothing(
    restarts: Restarts, tmp_path: Path
) -> None:
    fake, binary, stop_file = endless_flood(tmp_path)
    daemon, writer = await restarts.start_fake_session(binary)
    session_id = writer.session_id
    writer.say("flood until told")
    await writer.wait_for("text_delta", 10)
    await writer.close()
    for restart in range(20):
        if restart % 2:
            await asyncio.to_thread(daemon.kill9)
        else:  # `daemon stop --keep-sessions`
            assert daemon.process is not None
            daemon.process.send_signal(KEEP_SESSIONS_SIGNAL)
            assert await asyncio.to_thread(daemon.process.wait, 30) == 0
        await asyncio.to_thread(daemon.start)
    stop_file.touch()

    observer = restarts.client("observer")
    observer.resume(session_id, from_sequence=0)
    await observer.wait_for("turn_complete", within_s=120)
    stored = read_stored(restarts.database, session_id)
    assert_replayed_once(observer, stored)
    numbers = flood_numbers(restarts.database, session_id)
    assert numbers == list(range(len(numbers)))  # every line, once, in order
    assert len(observer.of_kind("text_delta")) == len(numbers)
    assert len(fake.starts()) == 1  # one claude all along


async def test_daemon_restart_during_a_turn_a_headless_run_sees_everything_once(
    restarts: Restarts, tmp_path: Path
) -> None:
    fake, binary, stop_file = endless_flood(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    daemon = await restarts.start(binary, {**ENV, "HOME": str(tmp_path)})
    env = daemon.env
    cli = [sys.executable, "-m", "betcode.cli.main"]
    run = subprocess.Popen(  # noqa: ASYNC220 - started once, read from a thread
        [*cli, "run", "flood until told", "--output", "text"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        await until(lambda: len(restarts.holders()) == 1, within_s=30)
        [holder] = restarts.holders()
        await until(lambda: spooled_end(holder["dir"]) > 8192, within_s=30)
        assert daemon.process is not None
        # Reaped as soon as it exits (a zombie would still look alive to `daemon stop`).
        exited = asyncio.ensure_future(asyncio.to_thread(daemon.process.wait, 60))
        restarted = await asyncio.to_thread(
            subprocess.run, [*cli, "daemon", "restart"], env=env, capture_output=True, timeout=60
        )
        assert restarted.returncode == 0, restarted.stderr
        assert await exited == 0
        await until(lambda: spooled_end(holder["dir"]) > 2 * 8192, within_s=30)
        stop_file.touch()
        out, err = await asyncio.to_thread(run.communicate, timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
        await asyncio.to_thread(
            subprocess.run, [*cli, "daemon", "stop"], env=env, capture_output=True, timeout=60
        )
    assert run.returncode == 0, err
    [session_id] = {h["session_id"] for h in [holder]}
    numbers = flood_numbers(restarts.database, session_id)
    assert numbers == list(range(len(numbers)))
    assert out.decode().strip() == "r" * len(numbers)  # each delta printed once
    assert len(fake.starts()) == 1


async def test_a_holder_whose_claude_exited_while_no_daemon_ran_is_collected(
    restarts: Restarts, tmp_path: Path
) -> None:
    fake = FakeClaude(tmp_path)
    flood = {"do": "flood", "lines": 300, "text": "e", "rate": 100}
    binary = fake.binary([{"turns": [[flood, {"do": "exit", "code": 1}]]}])
    daemon, writer = await restarts.start_fake_session(binary)
    session_id = writer.session_id
    writer.say("flood, then exit")
    await writer.wait_for("text_delta", 10)
    [holder] = restarts.holders()
    await asyncio.to_thread(daemon.kill9)
    claude = psutil.Process(holder["claude_pid"])
    await until(lambda: not claude.is_running(), within_s=30)  # exited with no daemon
    await asyncio.to_thread(daemon.start)

    observer = restarts.client("observer")
    observer.resume(session_id, from_sequence=0)
    await observer.wait_for_status(common_pb2.AGENT_STATUS_IDLE, after=1, within_s=60)
    # Its spool was ingested first (every line, once), then the holder went away.
    assert flood_numbers(restarts.database, session_id) == list(range(300))
    await until(lambda: not holder["dir"].exists(), within_s=30)
    await until(lambda: gone(holder["holder_pid"]), within_s=30)
    # Like a session without a holder: idle (its turn ended), not restarted.
    statuses = [e.status_change.status for e in observer.of_kind("status_change")]
    assert common_pb2.AGENT_STATUS_RESTARTING not in statuses
    assert len(fake.starts()) == 1
    stored = read_stored(restarts.database, session_id)
    assert_replayed_once(observer, stored)


async def test_a_holder_left_without_a_daemon_too_long_is_ingested_by_the_next_daemon(
    restarts: Restarts, tmp_path: Path
) -> None:
    """No claude is left running for ever by a daemon that never comes back: after
    daemon.holder.unattended_seconds its holder ends claude and leaves; what claude printed
    meanwhile is still ingested, once, by the daemon that comes back later."""
    fake, binary, _never = endless_flood(tmp_path)
    unattended = "--set", "holder.unattended_seconds=2"
    daemon, writer = await restarts.start_fake_session(binary, *unattended)
    session_id = writer.session_id
    writer.say("flood until stopped")
    await writer.wait_for("text_delta", 10)
    [holder] = restarts.holders()
    await asyncio.to_thread(daemon.kill9)
    committed = read_stored(restarts.database, session_id).committed_offset
    stored_before = len(flood_numbers(restarts.database, session_id))

    await until(lambda: gone(holder["holder_pid"]), within_s=30)
    assert gone(holder["claude_pid"])  # ended, not left to run for ever
    assert spooled_end(holder["dir"]) > committed  # what it printed meanwhile is kept
    await asyncio.to_thread(daemon.start)

    observer = restarts.client("observer")
    observer.resume(session_id, from_sequence=0)
    await until(lambda: not holder["dir"].exists(), within_s=30)  # replayed, then gone
    numbers = flood_numbers(restarts.database, session_id)
    assert numbers == list(range(len(numbers)))  # every line, once, in order
    assert len(numbers) > stored_before  # with those printed while no daemon ran
    await until(lambda: len(observer.of_kind("text_delta")) == len(numbers), within_s=30)
    # As for a claude that exited while no daemon ran: idle, no crash, no restart by itself.
    await observer.wait_for_status(common_pb2.AGENT_STATUS_IDLE, after=1, within_s=30)
    statuses = [e.status_change.status for e in observer.of_kind("status_change")]
    assert common_pb2.AGENT_STATUS_RESTARTING not in statuses
    assert len(fake.starts()) == 1
    writer = restarts.client("writer-again")
    writer.converse(agent_pb2.StartConversation(session_id=session_id))
    writer.say("go on")
    await until(lambda: len(fake.starts()) == 2, within_s=30)
    assert "--resume" in fake.starts()[1]  # the conversation goes on in a resumed claude
