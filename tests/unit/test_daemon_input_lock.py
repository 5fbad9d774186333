"""The input lock through a real daemon (in process, fake claude subprocess, real socket): an
idle holder loses the lock to a waiting client and every client is told; a settings reload
retimes the locks of live sessions and gives them the holder settings for their next claude."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harness.daemon import Client

from betcode.claude.backoff import SupervisorPolicy
from betcode.daemon import Daemon, DaemonConfig
from betcode.devtools.fake_claude import make_fake_claude
from betcode.sessions.context import SessionSettings
from betcode.v1 import agent_pb2

IDLE_SECONDS = 0.3


class World:
    def __init__(self, root: Path, daemon: Daemon) -> None:
        self.root = root
        self.daemon = daemon
        self.clients: list[Client] = []

    def client(self, name: str, start: agent_pb2.StartConversation) -> Client:
        client = Client(self.daemon.config.socket_path, name)
        self.clients.append(client)
        client.converse(start)
        return client


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    (tmp_path / "repo").mkdir()
    fake = make_fake_claude(tmp_path / "fake", {"turns": [[{"do": "text", "text": "ok"}]]})
    config = DaemonConfig(
        data_dir=tmp_path / "data",
        socket_path=tmp_path / "sock" / "daemon.sock",
        claude_bin=str(fake),
        environ={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)},
        policy=SupervisorPolicy(idle_reap_seconds=None),
        sessions=SessionSettings(lock_idle_seconds=IDLE_SECONDS),
        config_dir=tmp_path / "config",
    )
    daemon = Daemon(config)
    await daemon.start()
    world = World(tmp_path, daemon)
    try:
        yield world
    finally:
        for client in world.clients:
            await client.close()
        await daemon.stop()


def holders(client: Client) -> list[str]:
    return [e.input_lock.holder_client_id for e in client.of_kind("input_lock")]


async def two_clients_on_one_session(world: World) -> tuple[Client, Client]:
    first = world.client(
        "first", agent_pb2.StartConversation(working_directory=str(world.root / "repo"))
    )
    await first.wait_for("session_info")
    await first.wait_for("input_lock")
    second = world.client("second", agent_pb2.StartConversation(session_id=first.session_id))
    await second.wait_for("input_lock")
    assert holders(second) == ["first"]
    return first, second


async def test_an_idle_holder_loses_the_lock_to_the_waiting_client(world: World) -> None:
    first, second = await two_clients_on_one_session(world)
    first.say("one turn while holding the lock")
    await first.wait_for("turn_complete")

    second.say("may I?")
    refused = (await second.wait_for("error")).error
    assert refused.code == "NO_INPUT_LOCK"
    # The idle timer moves the lock once `first` has been silent for IDLE_SECONDS.
    await first.wait_for("input_lock", 2)
    await second.wait_for("input_lock", 2)
    assert holders(first)[-1] == holders(second)[-1] == "second"

    second.say("my turn now")
    await second.wait_for("turn_complete", 2)
    first.say("and mine?")
    assert (await first.wait_for("error")).error.code == "NO_INPUT_LOCK"


async def test_a_reload_retimes_the_locks_of_live_sessions(world: World) -> None:
    await two_clients_on_one_session(world)
    settings = world.daemon.config.settings_file
    settings.parent.mkdir(parents=True)
    settings.write_text(
        json.dumps(
            {"daemon": {"input_lock": {"transfer_seconds": 30, "idle_handover_seconds": 90}}}
        )
    )
    world.daemon.reload()
    assert world.daemon.sessions is not None
    (session,) = world.daemon.sessions.live
    assert (session.lock.transfer_timeout, session.lock.idle_transfer) == (30, 90)

    settings.write_text(json.dumps({"daemon": {"input_lock": {"idle_handover_seconds": 1}}}))
    world.daemon.reload()
    assert session.lock.idle_transfer == 90  # an invalid file changes nothing


async def test_a_reload_gives_live_sessions_the_holder_settings_for_their_next_claude(
    world: World,
) -> None:
    await two_clients_on_one_session(world)
    settings = world.daemon.config.settings_file
    settings.parent.mkdir(parents=True)
    holder = {"spool_limit_bytes": 32 * 1024 * 1024, "unattended_seconds": "1d"}
    settings.write_text(json.dumps({"daemon": {"holder": holder}}))
    world.daemon.reload()
    assert world.daemon.sessions is not None
    (session,) = world.daemon.sessions.live
    holding = session.supervisor.holding
    assert holding is not None
    assert (holding.place.spool_limit_bytes, holding.place.unattended_seconds) == (32 << 20, 86400)
    assert holding.journal is not None  # still the session's stdin journal

    # Below twice max_payload_bytes (10 MiB) a line could never be committed whole: refused.
    settings.write_text(json.dumps({"daemon": {"holder": {"spool_limit_bytes": 16 << 20}}}))
    world.daemon.reload()
    assert session.supervisor.holding == holding
