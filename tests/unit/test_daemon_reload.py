"""SIGHUP on a real daemon process: a bad settings file is logged (file, key, value, range) and
changes nothing; a good one takes effect. The setting watched is the crash budget, seen in how
often a fake claude that always crashes is started before its session is CRASHED."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from harness.daemon import Client, DaemonProcess, daemon_process_env

from betcode.devtools.fake_claude import make_fake_claude
from betcode.v1 import agent_pb2, common_pb2, health_pb2, health_pb2_grpc

CRASHED = common_pb2.AgentStatus.AGENT_STATUS_CRASHED


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.repo = root / "repo"
        self.repo.mkdir()
        self.starts_log = root / "starts.jsonl"
        crashing = {"startup": [{"do": "exit", "code": 1}]}
        fake = make_fake_claude(root / "fake", {"log": str(self.starts_log), "runs": [crashing]})
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root / "home")}
        self.daemon = DaemonProcess(root, daemon_process_env(root, fake, base))
        self.settings_file = root / "config" / "settings.json"
        self.clients: list[Client] = []

    def write_settings(self, crash_policy: dict[str, object]) -> None:
        self.settings_file.parent.mkdir(parents=True, exist_ok=True)
        self.settings_file.write_text(json.dumps({"daemon": {"crash_policy": crash_policy}}))

    def starts(self) -> int:
        if not self.starts_log.exists():
            return 0
        return len(self.starts_log.read_text().splitlines())

    async def sighup_and_wait_for(self, text: str) -> str:
        """Send SIGHUP; return the daemon's log from that moment once it contains `text`."""
        assert self.daemon.process is not None
        offset = self.daemon.log_path.stat().st_size
        self.daemon.process.send_signal(signal.SIGHUP)
        for _ in range(600):
            logged = self.daemon.log_path.read_bytes()[offset:].decode()
            if text in logged:
                return logged
            await asyncio.sleep(0.05)
        raise AssertionError(f"{text!r} not logged after SIGHUP; log:\n{logged}")

    async def session_until_crashed(self, name: str) -> Client:
        client = Client(self.daemon.socket, name)
        self.clients.append(client)
        client.converse(agent_pb2.StartConversation(working_directory=str(self.repo)))
        await client.wait_for("session_info")
        client.say("hello")
        while not any(e.status_change.status == CRASHED for e in client.of_kind("status_change")):
            await client.wait_for("status_change", len(client.of_kind("status_change")) + 1, 30)
        return client

    async def shutdown(self) -> int:
        """Close the clients first: open streams would hold the daemon's stop for its grace."""
        for client in self.clients:
            await client.close()
        self.clients.clear()
        return self.daemon.stop()

    async def config_health(self) -> str:
        async with grpc.aio.insecure_channel(f"unix:{self.daemon.socket}") as channel:
            stub = health_pb2_grpc.BetCodeHealthStub(channel)
            details = await stub.GetHealthDetails(health_pb2.HealthDetailsRequest())
        (config,) = [c for c in details.components if c.name == "config"]
        message: str = config.message
        return message


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    world = World(tmp_path)
    yield world
    await world.shutdown()


async def test_sighup_keeps_the_old_settings_on_an_error_and_applies_good_ones(
    world: World,
) -> None:
    world.write_settings({"max_crashes": 2, "initial_backoff_ms": 100})
    world.daemon.start()

    # A valid max_crashes beside an invalid backoff: nothing of the file may be applied.
    world.write_settings({"max_crashes": 1, "initial_backoff_ms": 50})
    logged = await world.sighup_and_wait_for("keeping the previous one")
    problem = (
        f"{world.settings_file}: daemon.crash_policy.initial_backoff_ms: "
        "50 is out of range (allowed 100 to 5000)"
    )
    assert problem in logged
    assert "SIGHUP received" in logged
    assert "changed from" not in logged
    await world.session_until_crashed("first")
    assert world.starts() == 2  # still the start's max_crashes
    assert problem in await world.config_health()

    world.write_settings({"max_crashes": 1, "initial_backoff_ms": 100, "window_seconds": "2m"})
    # Changes are logged in declaration order: window_seconds comes last.
    logged = await world.sighup_and_wait_for("daemon.crash_policy.window_seconds changed")
    assert "daemon.crash_policy.max_crashes changed from 2 to 1" in logged
    assert "daemon.crash_policy.window_seconds changed from 1m to 2m" in logged  # as written
    await world.session_until_crashed("second")
    assert world.starts() == 3  # one start, then CRASHED
    assert "reloaded 1 time(s)" in await world.config_health()
    assert await world.shutdown() == 0
