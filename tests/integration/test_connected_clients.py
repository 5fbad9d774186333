"""The `connected_clients` table follows real clients attaching to and dropping from a daemon
(docs/GRPC.md#silent-clients), and client activity — a heartbeat, any request in the session —
pushes back the expiry of the session's pending permissions (PRM-27)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from harness.daemon import Client, daemon_config

from betcode.daemon import Daemon
from betcode.devtools.fake_claude import make_fake_claude
from betcode.v1 import agent_pb2, agent_pb2_grpc

T = TypeVar("T")
ASK_THEN_WAIT = {
    "turns": [[{"do": "permission", "tool_name": "Bash", "input": {"command": "echo hi"}}]]
}
HEARTBEAT = agent_pb2.AgentRequest()
# A client in its own process, attached until it is killed.
DOOMED_CLIENT = """
import asyncio, sys
import grpc
from betcode.v1 import agent_pb2, agent_pb2_grpc

async def main():
    channel = grpc.aio.insecure_channel("unix:" + sys.argv[1])
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    async def requests():
        start = agent_pb2.StartConversation(
            session_id=sys.argv[2], client_type="headless", from_sequence=0
        )
        yield agent_pb2.AgentRequest(start=start)
        await asyncio.Event().wait()
    async for _ in stub.Converse(requests(), metadata=(("x-client-id", "doomed"),)):
        print("attached", flush=True)

asyncio.run(main())
"""


@dataclass
class World:
    daemon: Daemon
    socket: Path
    database: Path
    repo: Path
    clients: list[Client]

    def client(self, client_id: str, **start: object) -> Client:
        client = Client(self.socket, client_id)
        self.clients.append(client)
        client.converse(agent_pb2.StartConversation(**start))  # type: ignore[arg-type]
        return client

    def rows(self) -> dict[str, tuple[str | None, str, float, float]]:
        """client id → (session, type, connected_at, last_heartbeat)."""
        with sqlite3.connect(self.database) as conn:
            rows = conn.execute(
                "SELECT client_id, session_id, client_type, connected_at, last_heartbeat "
                "FROM connected_clients"
            )
            return {client_id: tuple(rest) for client_id, *rest in rows}

    def pending(self, request_id: str) -> tuple[float, int, float | None]:
        """(expires_at, extension_count, last_extended_at) of a pending request."""
        with sqlite3.connect(self.database) as conn:
            row = conn.execute(
                "SELECT expires_at, extension_count, last_extended_at FROM pending_permissions "
                "WHERE request_id = ?",
                (request_id,),
            ).fetchone()
        assert row is not None
        return row  # type: ignore[no-any-return]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    repo = tmp_path / "repo"
    repo.mkdir()
    fake = make_fake_claude(tmp_path / "fake", {"runs": [ASK_THEN_WAIT]})
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    config = daemon_config(tmp_path / "d", fake, environ, config_dir=tmp_path / "config")
    daemon = Daemon(config)
    await daemon.start()
    made = World(daemon, config.socket_path, config.data_dir / "daemon.db", repo, [])
    try:
        yield made
    finally:
        for client in made.clients:
            await client.close()
        await daemon.stop()


async def eventually(read: Callable[[], T], wanted: Callable[[T], bool], what: str) -> T:
    """Poll until the daemon's background writes show `what` (they are never waited on)."""
    for _ in range(600):
        value = read()
        if wanted(value):
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"never saw {what}; last: {value!r}")


async def test_rows_follow_clients_attaching_and_dropping(world: World) -> None:
    first = world.client("first", working_directory=str(world.repo))
    await first.wait_for("session_info")
    session_id = first.session_id
    flutter = world.client("phone", session_id=session_id, client_type="flutter")
    await flutter.wait_for("session_info")
    rows = await eventually(world.rows, lambda r: len(r) == 2, "two clients")
    assert {cid: row[:2] for cid, row in rows.items()} == {
        "first": (session_id, "cli"),
        "phone": (session_id, "flutter"),
    }
    assert all(connected <= seen for *_, connected, seen in rows.values())

    # An observer on ResumeSession is a client too; a second stream of the same id is not a
    # second row, and closing it leaves the row of the id's other stream.
    watcher = Client(world.socket, "first")
    world.clients.append(watcher)
    stream = watcher.stub.ResumeSession(
        agent_pb2.ResumeSessionRequest(session_id=session_id, follow=True),
        metadata=(("x-client-id", "w"),),
    )
    await stream.read()
    await eventually(world.rows, lambda r: "w" in r, "the observer")
    again = first.stub.ResumeSession(
        agent_pb2.ResumeSessionRequest(session_id=session_id, follow=True),
        metadata=(("x-client-id", "first"),),
    )
    await again.read()
    again.cancel()
    stream.cancel()
    await eventually(world.rows, lambda r: "w" not in r, "the observer gone")
    assert set(world.rows()) == {"first", "phone"}

    # A heartbeat is news of the client.
    seen_before = world.rows()["phone"][3]
    flutter.send(HEARTBEAT)
    await eventually(lambda: world.rows()["phone"][3], lambda s: s > seen_before, "a heartbeat")

    await flutter.close()
    await eventually(world.rows, lambda r: set(r) == {"first"}, "the phone gone")


async def test_a_killed_client_process_loses_its_row(world: World) -> None:
    first = world.client("first", working_directory=str(world.repo))
    await first.wait_for("session_info")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        DOOMED_CLIENT,
        str(world.socket),
        first.session_id,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        assert await asyncio.wait_for(process.stdout.readline(), 30) == b"attached\n"
        rows = await eventually(world.rows, lambda r: "doomed" in r, "the other process")
        assert rows["doomed"][:2] == (first.session_id, "headless")
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    await eventually(world.rows, lambda r: set(r) == {"first"}, "the killed client gone")


async def test_heartbeats_and_requests_in_the_session_extend_pending_permissions(
    world: World,
) -> None:
    holder = world.client("holder", working_directory=str(world.repo))
    await holder.wait_for("session_info")
    holder.say("run a tool")
    request_id = (await holder.wait_for("permission_request")).permission_request.request_id
    observer = world.client("observer", session_id=holder.session_id)
    # The history has the request; the still-pending copy follows once the attach's own
    # extensions are committed.
    replayed = (await observer.wait_for("permission_request", 2)).permission_request
    assert (replayed.request_id, replayed.is_replay) == (request_id, True)
    expires, count, extended = world.pending(request_id)

    observer.send(HEARTBEAT)
    after = await eventually(
        lambda: world.pending(request_id), lambda p: p[1] > count, "the heartbeat's extension"
    )
    assert after[1] == count + 1
    assert after[0] >= expires
    assert extended is None or (after[2] or 0) >= extended

    # A unary request naming the session counts as well (and is committed when it returns).
    channel = grpc.aio.insecure_channel(f"unix:{world.socket}")
    try:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        await stub.ListSessionGrants(
            agent_pb2.ListSessionGrantsRequest(session_id=holder.session_id)
        )
    finally:
        await channel.close()
    assert world.pending(request_id)[1] == count + 2
