"""Daemon faults provoked for real with a fake claude subprocess behind an in-process daemon:
kill -9 mid-turn, crash loops, hangs, garbage and oversized lines, stalled and dropped clients."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from harness.daemon import Client, daemon_config
from harness.fake_claude import FakeClaude, resume_id

from betcode.claude.backoff import SupervisorPolicy
from betcode.daemon import Daemon
from betcode.sessions.context import SessionSettings
from betcode.v1 import agent_pb2, common_pb2

Status = common_pb2.AgentStatus
FAST = SupervisorPolicy(
    backoff_initial=0.05,
    backoff_max=0.2,
    max_crashes=5,
    window_seconds=60.0,
    watchdog_seconds=30.0,
    kill_grace_seconds=0.3,
    idle_reap_seconds=None,
)
TEXT_TURN = [{"do": "text", "text": "all done"}]


class FakeWorld:
    """A fake claude (script + start log) and the daemons and clients made around it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.fake = FakeClaude(tmp_path)
        self.starts = self.fake.starts
        self.repo = tmp_path / "repo"
        self.repo.mkdir()
        self.clients: list[Client] = []

    @asynccontextmanager
    async def daemon(self, runs: list[dict[str, Any]], **overrides: Any) -> AsyncIterator[Daemon]:
        environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.tmp_path)}
        overrides.setdefault("policy", FAST)
        config = daemon_config(self.tmp_path, self.fake.binary(runs), environ, **overrides)
        running = Daemon(config)
        await running.start()
        self.socket = config.socket_path
        try:
            yield running
        finally:
            for client in self.clients:
                await client.close()
            await running.stop()

    def client(self, name: str, start: agent_pb2.StartConversation | None = None) -> Client:
        client = Client(self.socket, name)
        self.clients.append(client)
        client.converse(start or agent_pb2.StartConversation(working_directory=str(self.repo)))
        return client


def statuses(client: Client) -> list[int]:
    return [event.status_change.status for event in client.of_kind("status_change")]


def sequences(client: Client) -> list[int]:
    return [event.sequence for event in client.events if event.sequence]


async def test_kill9_of_claude_mid_turn_reports_the_crash_and_resumes_on_the_next_message(
    tmp_path: Path,
) -> None:
    world = FakeWorld(tmp_path)
    slow = {"turns": [[{"do": "flood", "lines": 400, "text": "x", "rate": 100}]]}
    async with world.daemon([slow, {"turns": [TEXT_TURN]}]) as daemon:
        client = world.client("one")
        await client.wait_for("session_info")
        client.say("start a long turn")
        await client.wait_for("text_delta", 5)  # mid-turn
        assert daemon.sessions is not None
        pid = daemon.sessions.live[0].supervisor.pid
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        crash = await client.wait_for("error")
        assert crash.error.code == "SUBPROCESS_CRASHED"
        await client.wait_for_status(Status.AGENT_STATUS_RESTARTING, crash.sequence)
        client.say("and now?")
        await client.wait_for("turn_complete")
        assert "all done" in "".join(e.text_delta.text for e in client.of_kind("text_delta"))
        claude_session = daemon.sessions.live[0].claude_session_id
    first, second = world.starts()
    assert resume_id(first) is None
    assert resume_id(second) == claude_session
    assert sequences(client) == list(range(1, len(sequences(client)) + 1))


async def test_five_crashes_in_the_window_end_in_crashed_until_the_next_message(
    tmp_path: Path,
) -> None:
    world = FakeWorld(tmp_path)
    slow = {"turns": [[{"do": "flood", "lines": 400, "text": "x", "rate": 100}]]}
    crashing = {"startup": [{"do": "exit", "code": 1}]}
    runs: list[dict[str, Any]] = [
        slow,
        crashing,
        crashing,
        crashing,
        crashing,
        {"turns": [TEXT_TURN]},
    ]
    async with world.daemon(runs) as daemon:
        client = world.client("one")
        await client.wait_for("session_info")
        client.say("hello")
        await client.wait_for("text_delta", 5)  # claude knows its session id now
        assert daemon.sessions is not None
        session = daemon.sessions.live[0]
        assert session.supervisor.pid is not None
        os.killpg(session.supervisor.pid, signal.SIGKILL)  # crash 1; its restarts crash too
        crashed = await client.wait_for_status(Status.AGENT_STATUS_CRASHED, within_s=20)
        until_crashed = statuses(client)
        assert len(world.starts()) == 5
        # Every restart is announced, even one right after another with the same message.
        assert until_crashed.count(Status.AGENT_STATUS_RESTARTING) == 4
        assert "send a message to try again" in crashed.status_change.message
        error = client.of_kind("error")[-1].error
        assert (error.code, "send a message to try again" in error.message) == (
            "SUBPROCESS_CRASHED",
            True,
        )
        # The next message is the manual action: a fresh crash budget, claude resumed.
        client.say("again")
        thinking = await client.wait_for_status(Status.AGENT_STATUS_THINKING, crashed.sequence)
        assert thinking.sequence == crashed.sequence + 2  # right after the UserInput
        done = await client.wait_for("turn_complete", within_s=20)
        await client.wait_for_status(Status.AGENT_STATUS_IDLE, done.sequence)
        assert not session.turn_active
    starts = world.starts()
    assert len(starts) == 6
    assert session.claude_session_id is not None
    assert resume_id(starts[-1]) == session.claude_session_id
    assert sequences(client) == list(range(1, len(sequences(client)) + 1))


async def test_hung_claude_is_killed_by_the_watchdog_and_restarted(tmp_path: Path) -> None:
    world = FakeWorld(tmp_path)
    hung = {"turns": [[{"do": "hang"}]]}
    policy = SupervisorPolicy(
        backoff_initial=0.05,
        backoff_max=0.2,
        watchdog_seconds=0.5,
        kill_grace_seconds=0.2,
        idle_reap_seconds=None,
    )
    async with world.daemon([hung, {"turns": [TEXT_TURN]}], policy=policy) as daemon:
        client = world.client("one")
        await client.wait_for("session_info")
        client.say("hang please")
        # The watchdog kill ends the turn with an error, and the restart is announced.
        killed = await client.wait_for("error", within_s=20)
        assert killed.error.code == "SUBPROCESS_CRASHED"
        restarting = await client.wait_for_status(Status.AGENT_STATUS_RESTARTING, killed.sequence)
        assert "no output for" in restarting.status_change.message
        client.say("again")
        await client.wait_for("turn_complete", within_s=20)
        assert daemon.sessions is not None
        claude_session = daemon.sessions.live[0].claude_session_id
    first, second = world.starts()
    assert resume_id(first) is None
    assert resume_id(second) == claude_session


async def test_garbage_and_oversized_lines_are_stored_and_the_stream_goes_on(
    tmp_path: Path,
) -> None:
    world = FakeWorld(tmp_path)
    limit = 1024 * 1024
    turn = [
        {"do": "raw", "text": "this is not json {"},
        {"do": "raw", "hex": "fffe7b0a"},
        {"do": "big_line", "bytes": limit + 200_000},
        {"do": "text", "text": "still talking"},
    ]
    policy = SupervisorPolicy(idle_reap_seconds=None, max_line_bytes=limit)
    async with world.daemon([{"turns": [turn]}], policy=policy):
        client = world.client("one")
        await client.wait_for("session_info")
        client.say("misbehave")
        await client.wait_for("turn_complete", within_s=20)
        session_id = client.session_id
    text = "".join(e.text_delta.text for e in client.of_kind("text_delta"))
    assert "still talking" in text
    with sqlite3.connect(tmp_path / "data" / "daemon.db") as db:
        db.text_factory = bytes  # raw lines are stored verbatim, even invalid UTF-8
        rows = db.execute(
            "SELECT sequence, payload FROM messages WHERE session_id = ? ORDER BY sequence",
            (session_id,),
        ).fetchall()
    payloads: list[bytes] = [payload for _, payload in rows]
    assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))
    assert any(b"this is not json {" in p for p in payloads)
    assert b"\xff\xfe{" in payloads
    assert max(len(p) for p in payloads) <= limit + 4096
    assert any(len(p) > limit // 2 for p in payloads)


async def test_a_stalled_client_does_not_delay_the_others_and_catches_up_without_loss(
    tmp_path: Path,
) -> None:
    world = FakeWorld(tmp_path)
    flood = {"turns": [[{"do": "flood", "lines": 3000, "text": "y"}]]}
    settings = SessionSettings(client_queue_size=16)
    async with world.daemon([flood], sessions=settings) as daemon:
        active = world.client("active")
        await active.wait_for("session_info")
        stalled = StalledClient(world.socket)
        await stalled.open(active.session_id)
        try:
            active.say("flood")
            await active.wait_for("turn_complete", within_s=30)
            final = max(sequences(active))
            assert sequences(active) == list(range(1, final + 1))
            assert daemon.sessions is not None
            got = await stalled.drain_until(final)
        finally:
            await stalled.close()
    assert got == list(range(1, final + 1))


class StalledClient:
    """A ResumeSession stream nobody reads until `drain_until`: gRPC flow control backs up."""

    def __init__(self, socket: Path) -> None:
        self.inner = Client(socket, "stalled")

    async def open(self, session_id: str) -> None:
        request = agent_pb2.ResumeSessionRequest(
            session_id=session_id, from_sequence=0, follow=True
        )
        self.call = self.inner.stub.ResumeSession(request, metadata=(("x-client-id", "stalled"),))
        await self.call.wait_for_connection()

    async def drain_until(self, final: int) -> list[int]:
        seen: list[int] = []
        async with asyncio.timeout(30):
            async for event in self.call:
                if event.sequence:
                    seen.append(event.sequence)
                if event.sequence >= final:
                    return seen
        return seen

    async def close(self) -> None:
        self.call.cancel()
        await self.inner.close()


async def test_a_dropped_client_resumes_with_exactly_the_missing_events(tmp_path: Path) -> None:
    world = FakeWorld(tmp_path)
    flood = {"turns": [[{"do": "flood", "lines": 300, "text": "z", "rate": 1000}]]}
    async with world.daemon([flood]):
        holder = world.client("holder")
        await holder.wait_for("session_info")
        dropped = world.client("dropped", agent_pb2.StartConversation(session_id=holder.session_id))
        await dropped.wait_for("session_info")
        holder.say("go")
        await dropped.wait_for("text_delta", 20)
        await dropped.close()
        last = max(sequences(dropped))
        await holder.wait_for("turn_complete", within_s=30)
        final = max(sequences(holder))
        start = agent_pb2.StartConversation(session_id=holder.session_id, from_sequence=last)
        back = world.client("dropped", start)
        await back.wait_for_sequence(final)
    assert sequences(back)[: final - last] == list(range(last + 1, final + 1))
    assert sequences(dropped) == list(range(1, last + 1))
    by_seq = {e.sequence: e.SerializeToString() for e in holder.events if e.sequence}
    assert all(by_seq[e.sequence] == e.SerializeToString() for e in back.events if e.sequence)
