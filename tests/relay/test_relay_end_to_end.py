"""Through the relay, as users run it: a relay process (embedded nats-server, SQLite), a daemon
dialing out to it with the machine certificate (`machine register` on its machine) running the
pinned real CLI against the mock model, and `betcode --relay ... --machine ...` commands in
their own processes on another "machine" (another config dir)."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from harness.daemon import InProcessDaemon, daemon_config
from harness.environment import Workspace
from harness.relay import BetcodeUser, RelayProcess, betcode_argv, finish, stderr_until

from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic
from betcode.tunnel.identity import MachineIdentity, RelayAddress

pytestmark = pytest.mark.real_cli

BASH_PROMPT = "SCN:tool_bash run it"
ALLOW_HINT = re.compile(r"betcode permissions allow (\S+)")
MACHINE = "workstation"


@dataclass
class World:
    relay: RelayProcess
    daemon: InProcessDaemon
    owner: BetcodeUser  # on the daemon's machine (registered it)
    client: BetcodeUser  # elsewhere, logged in as the same user


async def until_online(user: BetcodeUser, machine_id: str, within_s: float = 30.0) -> None:
    async with asyncio.timeout(within_s):
        while True:
            listed = await user.run("machine", "list")
            if any(machine_id in line and "online" in line for line in listed.out.splitlines()):
                return
            await asyncio.sleep(0.2)


@pytest.fixture
async def world(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> AsyncIterator[World]:
    relay = RelayProcess(tmp_path / "relay")
    relay.start()
    try:
        owner = BetcodeUser(relay, tmp_path / "daemon" / "config", workspace.repo)
        registered = await owner.run("auth", "register", "-u", "alice")
        assert registered.code == 0, registered.err
        machine = await owner.run("machine", "register", "--id", MACHINE, "--name", "Work")
        assert machine.code == 0, machine.err
        # It remembered the relay for the daemon: what a plain `daemon start` dials.
        settings = json.loads((owner.config_dir / "settings.json").read_text())
        assert settings["daemon"]["relay"]["urls"] == [relay.tunnel_url]
        # And its clients' address, for `web pair` to ask for pairing tickets there.
        remembered = MachineIdentity(owner.config_dir / "certs").relay()
        assert remembered == RelayAddress(relay.url, str(relay.ca.resolve()))
        config = replace(
            daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url)),
            relay_urls=tuple(settings["daemon"]["relay"]["urls"]),  # its CA: the one stored
        )
        running = Daemon(config)
        await running.start()
        try:
            client = BetcodeUser(relay, tmp_path / "client-config", workspace.repo)
            logged_in = await client.run("auth", "login", "-u", "alice")
            assert logged_in.code == 0, logged_in.err
            await until_online(client, MACHINE)
            yield World(relay, InProcessDaemon(running, config), owner, client)
        finally:
            await running.stop()
    finally:
        relay.stop()


async def test_a_turn_with_a_tool_call_allowed_through_the_relay(world: World) -> None:
    client = world.client
    running = await client.spawn("--machine", MACHINE, "run", BASH_PROMPT)
    request_id = await stderr_until(running, ALLOW_HINT)

    pending = await client.run("--machine", MACHINE, "permissions", "pending", "--json")
    assert pending.code == 0, pending.err
    assert [row["request_id"] for row in json.loads(pending.out)] == [request_id]
    allowed = await client.run("--machine", MACHINE, "permissions", "allow", request_id)
    assert (allowed.code, allowed.out.strip()) == (0, f"{request_id}: allowed"), allowed.err

    done = await finish(running)
    assert done.code == 0, done.err
    assert "hello-from-bash" in done.out
    # The daemon recorded it like any local turn: the same session is listed locally too.
    listed = await client.run("--machine", MACHINE, "sessions", "list", "--json")
    assert listed.code == 0, listed.err
    assert len(json.loads(listed.out)) == 1


async def test_doctor_on_the_machine_shows_the_tunnel(world: World) -> None:
    env = {**os.environ, "BETCODE_CONFIG_DIR": str(world.owner.config_dir)}
    env["BETCODE_SOCKET"] = str(world.daemon.config.socket_path)
    process = await asyncio.create_subprocess_exec(
        *betcode_argv("doctor"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _err = await asyncio.wait_for(process.communicate(), 60)
    shown = out.decode()
    assert f"registered as machine {MACHINE}" in shown
    assert f"tunnel: connected to {world.relay.tunnel_url} (relay " in shown


async def test_run_yes_through_the_active_machine(world: World) -> None:
    client = world.client
    switched = await client.run("machine", "switch", MACHINE)
    assert switched.code == 0, switched.err
    # No --machine: the stored active machine is used (via the relay named by --relay).
    done = await client.run("--machine", MACHINE, "run", "--yes", BASH_PROMPT)
    assert done.code == 0, done.err
    assert "hello-from-bash" in done.out


async def test_a_client_given_the_daemon_port_is_told_what_is_wrong(world: World) -> None:
    """The relay's daemon-only port wants a machine certificate: TLS ends at once. The client
    says which address it needs instead of a bare connection error."""
    wrong = await world.client.run("auth", "login", "-u", "alice", relay_url=world.relay.tunnel_url)
    assert wrong.code == 2
    assert "the address `betcode relay start` printed for clients" in wrong.err
