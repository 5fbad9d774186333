"""RequestInputLock through a real daemon with two clients on one session: the wait is
announced to both (InputLockRequested PENDING, with its deadline) and settled in the same
stored order for both — KEPT when the holder sends a message in time, the lock's
InputLockChange when the holder stays idle."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from harness.daemon import Client, daemon_config

from betcode.daemon import Daemon
from betcode.devtools.fake_claude import make_fake_claude
from betcode.sessions.context import SessionSettings
from betcode.v1 import agent_pb2

# Long enough for the holder's message to reach the daemon before the deadline on a loaded
# machine; the idle case waits it out once.
TRANSFER_SECONDS = 3.0
PENDING = agent_pb2.INPUT_LOCK_REQUEST_STATE_PENDING
KEPT = agent_pb2.INPUT_LOCK_REQUEST_STATE_KEPT


def lock_story(client: Client) -> list[tuple[int, tuple[object, ...]]]:
    """The lock events a client received, with their sequences, in arrival order."""
    story: list[tuple[int, tuple[object, ...]]] = []
    for event in client.events:
        if event.HasField("input_lock"):
            story.append((event.sequence, ("moved", event.input_lock.holder_client_id)))
        elif event.HasField("input_lock_requested"):
            asked = event.input_lock_requested
            story.append(
                (
                    event.sequence,
                    (asked.state, asked.requested_by_client_id, asked.holder_client_id),
                )
            )
    return story


async def test_both_clients_see_a_lock_request_kept_then_granted(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    fake = make_fake_claude(tmp_path / "fake", {"turns": [[{"do": "text", "text": "ok"}]]})
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    sessions = SessionSettings(lock_transfer_seconds=TRANSFER_SECONDS)
    config = daemon_config(tmp_path / "d", fake, environ, sessions=sessions)
    daemon = Daemon(config)
    await daemon.start()
    holder, asker = Client(config.socket_path, "holder"), Client(config.socket_path, "asker")
    try:
        holder.converse(agent_pb2.StartConversation(working_directory=str(repo)))
        await holder.wait_for("session_info")
        session_id = holder.session_id
        asker.converse(agent_pb2.StartConversation(session_id=session_id))
        await asker.wait_for("input_lock")

        def request_lock() -> asyncio.Future[agent_pb2.InputLockResponse]:
            answer: asyncio.Future[agent_pb2.InputLockResponse] = asyncio.ensure_future(
                asker.stub.RequestInputLock(
                    agent_pb2.InputLockRequest(session_id=session_id),
                    metadata=(("x-client-id", "asker"),),
                )
            )
            return answer

        # The holder answers by sending a message: it keeps the lock.
        kept = request_lock()
        announced = (await holder.wait_for("input_lock_requested")).input_lock_requested
        holder.say("still mine")
        assert (await kept).granted is False
        deadline = announced.request_deadline.ToNanoseconds() / 1e9
        stamped = (await asker.wait_for("input_lock_requested")).timestamp.ToNanoseconds() / 1e9
        assert abs(deadline - stamped - TRANSFER_SECONDS) < 0.01

        # The holder stays silent: the lock moves at the deadline.
        granted = request_lock()
        assert (await granted).granted is True
        for client in (holder, asker):
            await client.wait_for("input_lock", 2)

        expected = [
            ("moved", "holder"),
            (PENDING, "asker", "holder"),
            (KEPT, "asker", "holder"),
            (PENDING, "asker", "holder"),
            ("moved", "asker"),
        ]
        assert [what for _, what in lock_story(holder)] == expected
        assert lock_story(asker) == lock_story(holder)  # the same stored events, same seqs
        assert [seq for seq, _ in lock_story(holder)] == sorted(
            seq for seq, _ in lock_story(holder)
        )
    finally:
        await holder.close()
        await asker.close()
        await daemon.stop()
