"""CompactSession: claude's own `/compact` (docs/PROTOCOL.md#slash-commands: a slash command sent as
user text runs locally in stream-json mode and ends in a `result`), started only between turns of a
session
that has a conversation, and only by the client holding the input lock (or by anyone when nobody
holds it)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from harness.daemon import Client, InProcessDaemon, daemon_config
from harness.environment import Workspace

from betcode.daemon import Daemon
from betcode.devtools.fake_claude import make_fake_claude
from betcode.v1 import agent_pb2, common_pb2

Status = common_pb2.AgentStatus


def compact(client: Client, client_id: str) -> grpc.aio.UnaryUnaryCall:
    return client.stub.CompactSession(
        agent_pb2.CompactSessionRequest(session_id=client.session_id),
        metadata=(("x-client-id", client_id),),
    )


def user_inputs(client: Client) -> list[str]:
    return [event.user_input.content for event in client.of_kind("user_input")]


@pytest.mark.real_cli
async def test_compact_runs_claudes_own_compaction_between_turns(
    daemon: InProcessDaemon, clients: Callable[[str], Client], workspace: Workspace
) -> None:
    client = clients("holder")
    client.converse(agent_pb2.StartConversation(working_directory=str(workspace.repo)))
    await client.wait_for("session_info")
    client.say("hello")
    await client.wait_for("turn_complete")

    response = await compact(client, "holder")
    assert response.messages_before > 0
    done = await client.wait_for("turn_complete", 2)
    await client.wait_for_sequence(done.sequence + 1)  # the IDLE status that follows it
    statuses = [event.status_change.status for event in client.of_kind("status_change")]
    assert Status.AGENT_STATUS_COMPACTING in statuses
    assert statuses[-1] == Status.AGENT_STATUS_IDLE
    assert client.of_kind("error") == [], done
    assert user_inputs(client) == ["hello", "/compact"]
    # The CLI compacted the conversation itself; the model never saw "/compact" as a prompt.
    with sqlite3.connect(daemon.config.data_dir / "daemon.db") as conn:
        out = [
            json.loads(p)
            for (p,) in conn.execute("SELECT payload FROM messages WHERE direction = 'out'")
        ]
    assert any(line.get("subtype") == "compact_boundary" for line in out)
    [result] = [line for line in out if line.get("local_command") == "compact"]
    assert result["is_error"] is False

    client.say("still there?")  # the conversation goes on after compaction
    await client.wait_for("turn_complete", 3)


@pytest.fixture
async def fake_daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, Path]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    slow = {"turns": [[{"do": "text", "text": "ok"}, {"do": "sleep", "seconds": 0.5}]]}
    fake = make_fake_claude(tmp_path / "fake", {"runs": [slow]})
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    config = daemon_config(tmp_path / "d", fake, environ, config_dir=tmp_path / "config")
    daemon = Daemon(config)
    await daemon.start()
    try:
        yield daemon, repo
    finally:
        await daemon.stop()


async def test_compact_waits_for_the_turn_and_respects_the_lock(
    fake_daemon: tuple[Daemon, Path],
) -> None:
    daemon, repo = fake_daemon
    holder = Client(daemon.config.socket_path, "holder")
    other = Client(daemon.config.socket_path, "other")
    try:
        holder.converse(agent_pb2.StartConversation(working_directory=str(repo)))
        await holder.wait_for("session_info")
        other.converse(agent_pb2.StartConversation(session_id=holder.session_id))
        await other.wait_for("session_info")

        with pytest.raises(grpc.aio.AioRpcError) as empty:
            await compact(holder, "holder")
        assert empty.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no conversation to compact yet" in (empty.value.details() or "")

        holder.say("a turn")
        await holder.wait_for("text_delta")  # mid-turn
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            await compact(holder, "holder")
        assert busy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "middle of a turn" in (busy.value.details() or "")
        await holder.wait_for("turn_complete")

        with pytest.raises(grpc.aio.AioRpcError) as locked:
            await compact(holder, "other")
        assert locked.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "does not hold the input lock" in (locked.value.details() or "")
        assert user_inputs(holder) == ["a turn"]

        await compact(holder, "holder")
        await holder.wait_for("turn_complete", 2)
        await other.wait_for("turn_complete", 2)
        assert user_inputs(other) == ["a turn", "/compact"]
    finally:
        await holder.close()
        await other.close()
