"""A buffered request and a daemon killed with kill -9 while taking it: the relay delivers it
again, and it runs once. A relay in this event loop (its own nats-server), the daemon as a real
process (harness/kill_point.py kills it at the exact point) with the pinned real CLI and the
mock model, a client through the relay, every call sealed to the machine's identity key."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio
import pytest
from harness import kill_point
from harness.daemon import DaemonProcess, daemon_config, daemon_process_env
from harness.environment import Workspace
from harness.relay import (
    MACHINE,
    Rig,
    client_channel,
    register,
    register_machine,
    relay_in_process,
    until,
    until_reachable,
)

from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.relay.buffer import BufferSettings
from betcode.remote.frames import ACK_METADATA, ACK_RECORDED, BUFFERED_TRAILER
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import agent_pb2

pytestmark = pytest.mark.real_cli

MARKER = "taken-when-the-daemon-died"


@dataclass
class Machine:
    """The relay's rig (its client calls sealed to the machine) and the daemon as a process."""

    rig: Rig
    daemon: DaemonProcess

    async def start(self, *launcher: str) -> None:
        self.daemon.launcher = launcher or ("-m", "betcode.cli.main")
        await asyncio.to_thread(self.daemon.start)

    async def buffered_message(self, session_id: str, text: str, key: str) -> None:
        """`run --session` to the offline machine: a Converse with one message, half-closed,
        asking to end once the message is recorded; the relay keeps it."""
        requests = [
            agent_pb2.AgentRequest(start=agent_pb2.StartConversation(session_id=session_id)),
            agent_pb2.AgentRequest(
                message=agent_pb2.UserMessage(content=text, idempotency_key=key)
            ),
        ]
        call = self.rig.agent.Converse(
            iter(requests), metadata=(*self.rig.metadata, (ACK_METADATA, ACK_RECORDED))
        )
        with pytest.raises(grpc.aio.AioRpcError) as offline:
            async for _event in call:
                pass
        assert offline.value.code() == grpc.StatusCode.UNAVAILABLE, offline.value.details()
        assert BUFFERED_TRAILER in dict(offline.value.trailing_metadata() or ())

    async def pending(self) -> int:
        assert self.rig.relay.buffer is not None
        return len(await self.rig.relay.buffer.pending(MACHINE))


@pytest.fixture
async def machine(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[Machine]:
    async with (
        relay_in_process(tmp_path / "relay", buffer=BufferSettings()) as relay,
        client_channel(relay) as channel,
    ):
        account = await register(channel, "alice")
        root = tmp_path / "daemon"
        root.mkdir()
        environ = workspace.env(mock_api.base_url)
        await register_machine(
            channel, account, MACHINE, MachineIdentity(root / "config" / "certs")
        )
        # The in-process config only names the daemon's folders (its identity key is there).
        rig = Rig(relay, channel, account, daemon_config(root, claude_bin, environ))
        daemon = DaemonProcess(
            root,
            daemon_process_env(root, claude_bin, environ),
            args=("--relay", f"https://127.0.0.1:{relay.tunnel_port}"),
        )
        try:
            yield Machine(rig, daemon)
        finally:
            await asyncio.to_thread(daemon.stop)


def user_lines(database: Path, text: str) -> int:
    with closing(sqlite3.connect(database)) as db:
        (count,) = db.execute(
            "SELECT COUNT(*) FROM messages WHERE direction = 'in' AND message_type = 'user' "
            "AND payload LIKE ?",
            (f"%{text}%",),
        ).fetchone()
    return int(count)


def sent_to_model(mock_api: MockAnthropic, text: str) -> int:
    """The model's requests whose latest user turn holds `text` (one per sending)."""
    count = 0
    for request in mock_api.message_requests:
        user_turns = [m for m in (request.body or {}).get("messages", []) if m["role"] == "user"]
        count += bool(user_turns) and text in json.dumps(user_turns[-1])
    return count


@pytest.mark.timeout(300)
async def test_a_buffered_message_whose_daemon_died_taking_it_is_delivered_again_once(
    machine: Machine, workspace: Workspace, mock_api: MockAnthropic
) -> None:
    """The daemon opens the sealed call (its replay record is written), then dies with kill -9
    as the message is handed to the store, before anything of it is committed. The relay never
    got an answer, so it keeps the request and delivers it to the next daemon, which must run
    it: before, that delivery was refused as a replay and the message was lost."""
    rig = machine.rig
    await machine.start()
    await until_reachable(rig)
    first = [
        agent_pb2.AgentRequest(
            start=agent_pb2.StartConversation(working_directory=str(workspace.repo))
        ),
        agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content="SCN:plain")),
    ]
    call = rig.agent.Converse(iter(first), metadata=rig.metadata)
    async for event in call:
        if event.WhichOneof("event") == "turn_complete":
            call.cancel()
            break
    [session] = (
        await rig.agent.ListSessions(agent_pb2.ListSessionsRequest(), metadata=rig.metadata)
    ).sessions
    await asyncio.to_thread(machine.daemon.stop)

    await machine.buffered_message(session.id, f"SCN:plain {MARKER}", "key-of-the-message")
    assert await machine.pending() == 1
    with contextlib.suppress(RuntimeError):  # it may die before it is seen serving
        await machine.start(kill_point.__file__, "before-commit", MARKER, "--")
    await asyncio.to_thread(machine.daemon.wait_killed, 90)  # by SIGKILL, or this fails
    database = machine.daemon.root / "data" / "daemon.db"
    assert await asyncio.to_thread(user_lines, database, MARKER) == 0  # nothing of it stored
    assert await machine.pending() == 1  # never answered: still buffered

    await machine.start()

    async def delivered() -> bool:
        return await machine.pending() == 0

    await until(delivered, 90)
    # The relay deletes it only once the daemon answered, which it does once it recorded it.
    assert await asyncio.to_thread(user_lines, database, MARKER) == 1, machine.daemon.log_path

    async def sent_once() -> bool:
        return sent_to_model(mock_api, MARKER) == 1

    await until(sent_once, 90)
    assert await asyncio.to_thread(user_lines, database, MARKER) == 1
