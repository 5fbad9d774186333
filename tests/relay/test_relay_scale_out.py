"""Scale-out: a 3-node NATS cluster, PostgreSQL (Debian's package, in a scratch dir) and two
relay processes A and B sharing both. The daemon tunnels to A (B is its fallback), the client
talks to B. Mid-turn, with a tool call waiting for approval, A is killed: the daemon reconnects
to B, the client's stream (still on B) is told its call is gone and resumes from its last
sequence, the approval given through B completes the turn, and the client saw every event
exactly once."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from harness.daemon import daemon_config
from harness.environment import Workspace
from harness.relay import BetcodeUser, RelayProcess, stderr_until
from harness.servers import nats_cluster, postgres

from betcode.daemon import Daemon
from betcode.devtools.mock_anthropic import MockAnthropic

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]

BASH_PROMPT = "SCN:tool_bash run it"
ALLOW_HINT = re.compile(r"betcode permissions allow (\S+)")
MACHINE = "workstation"


async def test_relay_a_dies_mid_turn_and_the_session_goes_on_through_b(
    tmp_path: Path, claude_bin: Path, mock_api: MockAnthropic, workspace: Workspace
) -> None:
    with postgres() as database_url:
        async with nats_cluster(tmp_path / "nats") as cluster:
            shared = ["--database-url", database_url]
            for server in cluster:
                shared += ["--nats", server.url]
            relay_a = RelayProcess(tmp_path / "relay", extra_args=[*shared, "--relay-id", "A"])
            relay_b = RelayProcess(tmp_path / "relay", extra_args=[*shared, "--relay-id", "B"])
            relay_a.start()
            relay_b.start()
            try:
                await _story(tmp_path, claude_bin, mock_api, workspace, relay_a, relay_b)
            finally:
                relay_a.stop()
                relay_b.stop()


async def _story(
    tmp_path: Path,
    claude_bin: Path,
    mock_api: MockAnthropic,
    workspace: Workspace,
    relay_a: RelayProcess,
    relay_b: RelayProcess,
) -> None:
    owner = BetcodeUser(relay_a, tmp_path / "daemon" / "config", workspace.repo)
    assert (await owner.run("auth", "register", "-u", "alice")).code == 0
    assert (await owner.run("machine", "register", "--id", MACHINE)).code == 0
    config = replace(
        daemon_config(tmp_path / "daemon", claude_bin, workspace.env(mock_api.base_url)),
        relay_urls=(relay_a.tunnel_url, relay_b.tunnel_url),
    )
    daemon = Daemon(config)
    await daemon.start()
    try:
        client = BetcodeUser(relay_b, tmp_path / "client-config", workspace.repo)
        assert (await client.run("auth", "login", "-u", "alice")).code == 0  # accounts: shared
        running = await client.spawn(
            "--machine", MACHINE, "run", "--output", "stream-json", BASH_PROMPT
        )
        request_id = await stderr_until(running, ALLOW_HINT)

        relay_a.kill9()  # the daemon's relay is gone, mid-turn

        attempts: list[str] = []

        async def allow_through_b() -> None:
            while True:
                allowed = await client.run("--machine", MACHINE, "permissions", "allow", request_id)
                if allowed.code == 0:
                    return
                attempts.append(allowed.err)
                await asyncio.sleep(0.5)  # until the daemon has reconnected to B

        try:
            await asyncio.wait_for(allow_through_b(), 90)
        except TimeoutError:
            raise AssertionError(f"never allowed through B: {attempts[-3:]}") from None
        out, err = await asyncio.wait_for(running.communicate(), 90)
        assert running.returncode == 0, err.decode()
        events = [json.loads(line) for line in out.decode().splitlines()]
        # No gap: every sequence from the first to the last was seen. No duplicate: no event
        # arrived twice (a permission request still waiting is re-sent after a reconnect on
        # purpose, flagged is_replay, and the input-lock notice carries the current sequence).
        sequences = {int(event["sequence"]) for event in events if "sequence" in event}
        assert sequences == set(range(min(sequences), max(sequences) + 1))
        contents = [
            json.dumps({k: v for k, v in event.items() if k != "timestamp"}, sort_keys=True)
            for event in events
            if not any(isinstance(v, dict) and v.get("is_replay") for v in event.values())
        ]
        assert len(contents) == len(set(contents))
        assert any("hello-from-bash" in json.dumps(event) for event in events)
        # The run did lose its stream (relay A's calls are gone) and picked it up through B.
        assert "lost the daemon (the machine's tunnel moved or closed)" in err.decode()
        assert "reconnected to the daemon" in err.decode()
    finally:
        await daemon.stop()
