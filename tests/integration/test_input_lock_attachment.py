"""The input lock only goes to a client attached to the session with Converse, through a real
daemon: RequestInputLock from a client without a stream is refused (FAILED_PRECONDITION,
NO_INPUT_LOCK) and changes nothing; a requester whose stream closed while its call waits is
not given the lock at the deadline (KEPT), so the holder goes on typing."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import grpc
import pytest
from harness.daemon import Client, daemon_config
from harness.lock_story import lock_story

from betcode.core.errors import ERROR_CODE_METADATA_KEY
from betcode.daemon import Daemon, DaemonConfig
from betcode.devtools.fake_claude import make_fake_claude
from betcode.sessions.context import SessionSettings
from betcode.v1 import agent_pb2

PENDING = agent_pb2.INPUT_LOCK_REQUEST_STATE_PENDING
KEPT = agent_pb2.INPUT_LOCK_REQUEST_STATE_KEPT
# Long enough for a closed stream to reach the daemon before the deadline on a loaded machine.
TRANSFER_SECONDS = 3.0


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
async def config(tmp_path: Path) -> AsyncIterator[DaemonConfig]:
    turns = {"turns": [[{"do": "text", "text": "ok"}], [{"do": "text", "text": "ok"}]]}
    fake = make_fake_claude(tmp_path / "fake", turns)
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    sessions = SessionSettings(lock_transfer_seconds=TRANSFER_SECONDS)
    config = daemon_config(tmp_path / "d", fake, environ, sessions=sessions)
    daemon = Daemon(config)
    await daemon.start()
    try:
        yield config
    finally:
        await daemon.stop()


async def request_lock(client: Client, session_id: str) -> agent_pb2.InputLockResponse:
    response: agent_pb2.InputLockResponse = await client.stub.RequestInputLock(
        agent_pb2.InputLockRequest(session_id=session_id),
        metadata=(("x-client-id", client.client_id),),
    )
    return response


async def holder_in_a_session(config: DaemonConfig, repo: Path) -> Client:
    holder = Client(config.socket_path, "holder")
    holder.converse(agent_pb2.StartConversation(working_directory=str(repo)))
    await holder.wait_for("session_info")
    return holder


async def gone_from_connected_clients(config: DaemonConfig, client_id: str) -> None:
    """The daemon noticed the client's stream close (it removes the row after letting go of
    the input lock)."""
    database = config.data_dir / "daemon.db"
    for _ in range(400):
        with closing(sqlite3.connect(database)) as db:
            rows = db.execute(
                "SELECT 1 FROM connected_clients WHERE client_id = ?", (client_id,)
            ).fetchall()
        if not rows:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{client_id} is still listed in connected_clients")


async def test_a_client_without_a_converse_stream_is_refused_the_lock(
    config: DaemonConfig, repo: Path
) -> None:
    holder = await holder_in_a_session(config, repo)
    stranger = Client(config.socket_path, "stranger")  # RequestInputLock only, no stream
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await asyncio.wait_for(request_lock(stranger, holder.session_id), 30)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "attach to the session with Converse" in (refused.value.details() or "")
        trailing = dict(refused.value.trailing_metadata() or ())
        assert trailing[ERROR_CODE_METADATA_KEY] == "NO_INPUT_LOCK"

        holder.say("the lock is still mine")
        await holder.wait_for("turn_complete")
        assert lock_story(holder.events) == [("moved", "holder")]  # no wait was ever announced
    finally:
        await stranger.close()
        await holder.close()


async def test_a_requester_whose_stream_closed_gets_no_lock_at_the_deadline(
    config: DaemonConfig, repo: Path
) -> None:
    holder = await holder_in_a_session(config, repo)
    asker = Client(config.socket_path, "asker")
    asker.converse(agent_pb2.StartConversation(session_id=holder.session_id))
    await asker.wait_for("input_lock")
    # The same client id on a channel of its own: its call outlives the Converse stream.
    asker_call = Client(config.socket_path, "asker")
    try:
        request = asyncio.ensure_future(request_lock(asker_call, holder.session_id))
        await holder.wait_for("input_lock_requested")
        await asker.close()
        await gone_from_connected_clients(config, "asker")
        assert not request.done(), "the deadline passed before the daemon saw the stream close"
        assert (await asyncio.wait_for(request, 30)).granted is False
        await holder.wait_for("input_lock_requested", 2)
        assert lock_story(holder.events) == [
            ("moved", "holder"),
            (PENDING, "asker", "holder"),
            (KEPT, "asker", "holder"),
        ]
        holder.say("the lock is still mine")
        await holder.wait_for("turn_complete")  # its input is still taken
    finally:
        await asker_call.close()
        await asker.close()
        await holder.close()
