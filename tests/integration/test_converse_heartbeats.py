"""Heartbeats on Converse over a real daemon's Unix socket (docs/GRPC.md#silent-clients), with a
short silence timeout: a client that has sent a heartbeat and then goes silent is dropped and its
input lock
passed on; a client that never sent one is left alone; BetCode's own client keeps sending them
and stays attached."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from harness.daemon import Client, daemon_config

from betcode.cli.connection import DaemonAddress, DaemonClient
from betcode.cli.conversation import ConnectionChange, ConversationStream, StreamItem
from betcode.config.settings import DaemonSettings
from betcode.core.errors import ErrorCode
from betcode.daemon import Daemon
from betcode.devtools.fake_claude import make_fake_claude
from betcode.v1 import agent_pb2

T = TypeVar("T")
SILENCE_S = 3.0  # ours heartbeats every 0.3 s: a loaded CI box would need a 3 s stall to drop it
HEARTBEAT = agent_pb2.AgentRequest()


@dataclass
class World:
    socket: Path
    database: Path
    repo: Path
    clients: list[Client]

    def client(self, client_id: str, **start: object) -> Client:
        client = Client(self.socket, client_id)
        self.clients.append(client)
        client.converse(agent_pb2.StartConversation(**start))  # type: ignore[arg-type]
        return client

    def rows(self) -> dict[str, tuple[float, float]]:
        """client id → (connected_at, last_heartbeat), from connected_clients."""
        with sqlite3.connect(self.database) as conn:
            rows = conn.execute(
                "SELECT client_id, connected_at, last_heartbeat FROM connected_clients"
            )
            return {client_id: (connected, seen) for client_id, connected, seen in rows}


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    repo = tmp_path / "repo"
    repo.mkdir()
    fake = make_fake_claude(tmp_path / "fake", {"runs": []})
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    config = daemon_config(
        tmp_path / "d",
        fake,
        environ,
        config_dir=tmp_path / "config",
        # Below the 10 s a settings file may set: the daemon takes what its config says.
        settings=DaemonSettings(client_silence_seconds=SILENCE_S),
    )
    daemon = Daemon(config)
    await daemon.start()
    made = World(config.socket_path, config.data_dir / "daemon.db", repo, [])
    try:
        yield made
    finally:
        for client in made.clients:
            await client.close()
        await daemon.stop()


async def eventually(read: Callable[[], T], wanted: Callable[[T], bool], what: str) -> T:
    """Poll until `read()` gives what is wanted (the daemon writes client rows in the
    background)."""
    for _ in range(600):
        value = read()
        if wanted(value):
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"never saw {what}; last: {value!r}")


def holds_lock(client: Client) -> bool:
    changes = client.of_kind("input_lock")
    return bool(changes) and changes[-1].input_lock.holder_client_id == client.client_id


async def test_a_silent_heartbeating_client_is_dropped_and_its_lock_passed_on(
    world: World,
) -> None:
    quiet = world.client("quiet", working_directory=str(world.repo))
    await quiet.wait_for("session_info")
    session_id = quiet.session_id
    await eventually(lambda: holds_lock(quiet), bool, "quiet holding the input lock")
    old = world.client("old", session_id=session_id)  # never sends a heartbeat
    await old.wait_for("session_info")

    seen: list[StreamItem] = []
    ours = DaemonClient(DaemonAddress(world.socket, "test"), client_id="ours")
    stream = ConversationStream(ours, session_id=session_id, heartbeat_interval=SILENCE_S / 10)

    async def follow() -> None:
        async for item in stream.items():
            seen.append(item)

    following = asyncio.create_task(follow())
    try:
        # Our first heartbeat is in: from now on we too would be dropped if we went silent.
        await eventually(
            world.rows, lambda rows: "ours" in rows and rows["ours"][1] > rows["ours"][0], "ours"
        )
        quiet.send(HEARTBEAT)  # from now on `quiet` must keep it up, and it does not

        dropped = await quiet.wait_for("error", within_s=30)
        assert (dropped.sequence, dropped.error.code) == (0, ErrorCode.CLIENT_SILENT)
        assert not dropped.error.is_fatal  # a client that wakes up may reconnect
        await eventually(lambda: quiet.events[-1] is dropped, bool, "the end of quiet's stream")
        await eventually(world.rows, lambda rows: "quiet" not in rows, "quiet's row gone")
        await eventually(lambda: holds_lock(old), bool, "the lock passed to the old client")

        # Both were silent for longer than the timeout (ours since before quiet's heartbeat),
        # but `old` never promised heartbeats and `ours` keeps sending them: both stay.
        assert {"old", "ours"} <= set(world.rows())
        assert not old.of_kind("error")
        changes = [item for item in seen if isinstance(item, ConnectionChange)]
        assert changes == [ConnectionChange(connected=True)]  # never dropped
        events = [item for item in seen if isinstance(item, agent_pb2.AgentEvent)]
        assert "error" not in [event.WhichOneof("event") for event in events]
        assert events[-1].input_lock.holder_client_id == "old"  # ours saw the handover too
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await ours.close()


async def test_a_betcode_client_dropped_for_silence_reconnects_by_itself(world: World) -> None:
    """A client too slow with its heartbeats (as a stopped one that is woken up) is told why it
    was dropped and then heals the drop like any other."""
    ours = DaemonClient(DaemonAddress(world.socket, "test"), client_id="late")
    stream = ConversationStream(
        ours, working_directory=str(world.repo), heartbeat_interval=SILENCE_S * 1.5
    )
    items = stream.items()
    try:
        told: agent_pb2.AgentEvent | None = None
        while True:
            item = await asyncio.wait_for(anext(items), 30)
            if isinstance(item, agent_pb2.AgentEvent) and item.WhichOneof("event") == "error":
                told = item
            elif isinstance(item, ConnectionChange) and not item.connected:
                break
        assert told is not None
        assert told.error.code == ErrorCode.CLIENT_SILENT
        assert await asyncio.wait_for(anext(items), 30) == ConnectionChange(connected=True)
        await eventually(world.rows, lambda rows: "late" in rows, "the reconnected client")
    finally:
        await items.aclose()
        await ours.close()
