"""End-to-end encryption (SEC-13) as seen from the middle: everything the relay's NATS carries
(every subject, headers and bodies) and everything the relay keeps on disk (JetStream store,
accounts database) is inspected for what the user typed and what the model answered, during a
real turn through the relay and a request buffered for the offline machine; only ciphertext
may be there. The fingerprint the client pins on first use is the one `betcode daemon status`
shows on the machine. Then the daemon's identity key changes: the client refuses it, loudly,
until `machine trust` is given the new fingerprint (a wrong one changes nothing)."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harness.environment import Workspace
from harness.relay import (
    MACHINE,
    BetcodeUser,
    Carried,
    RelayProcess,
    Rig,
    betcode_argv,
    rig_fixture,
)

from betcode.cli.connection import DaemonAddress, DaemonClient, DaemonUnavailable
from betcode.cli.relay_login import RelayChoice
from betcode.relay.buffer import BufferSettings
from betcode.tunnel.identity import MachineIdentity

pytestmark = pytest.mark.real_cli

PROMPT_SECRET = "prompt-secret-4242"
ANSWER_SECRET = "answer-secret-7777"
NAME_SECRET = "name-secret-9191"
SECRETS = (PROMPT_SECRET.encode(), ANSWER_SECRET.encode(), NAME_SECRET.encode())


rig = pytest.fixture(rig_fixture(BufferSettings()))


@pytest.fixture
async def carried(rig: Rig) -> AsyncIterator[Carried]:
    seen = Carried(rig.relay.nc, [], [])
    await seen.watch(">")
    yield seen
    await seen.subscription.unsubscribe()


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


async def test_the_relay_and_nats_carry_and_keep_only_ciphertext(
    rig: Rig,
    carried: Carried,
    workspace: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await rig.start_daemon()
    relay_files = rig.relay.options.files.root
    user = BetcodeUser(
        RelayProcess(relay_files, url=f"https://127.0.0.1:{rig.relay.port}"),
        tmp_path / "client-config",
        workspace.repo,
    )
    assert (await user.run("auth", "login", "-u", "alice")).code == 0
    prompt = f'SCN:plain {{"text": "{ANSWER_SECRET}"}} {PROMPT_SECRET}'
    done = await user.run("--machine", MACHINE, "run", prompt)
    assert done.code == 0, done.err
    assert ANSWER_SECRET in done.out  # it did go through, in the clear at both ends
    pinned = re.search(r"pinned machine box's key, fingerprint (\S+)", done.err)
    assert pinned is not None, done.err
    assert pinned.group(1) == await machine_fingerprint(rig)  # what a person compares
    listed = await user.run("--machine", MACHINE, "sessions", "list", "--json")
    assert listed.code == 0, listed.err
    [session] = json.loads(listed.out)

    await rig.stop_daemon()
    # Any subscriber on the machine's subject would count as its responder: while the machine
    # is offline the spy watches the buffer's subjects only.
    await carried.watch("betcode.held.>")
    # The CLI's own client (as `sessions rename` uses it): sealed with the pinned key, buffered.
    monkeypatch.setenv("BETCODE_CONFIG_DIR", str(user.config_dir))
    choice = RelayChoice(user.relay.url, user.relay.ca, MACHINE)
    client = await DaemonClient.connect(DaemonAddress(Path(choice.url), "--relay", choice))
    with pytest.raises(DaemonUnavailable, match="queued on the relay until box reconnects"):
        await client.rename_session(session["id"], NAME_SECRET)
    await client.close()

    assert any(s.startswith("betcode.machine.") for s in carried.subjects)
    assert any(s.startswith("betcode.held.") for s in carried.subjects)
    leaks = [secret for secret in SECRETS for payload in carried.payloads if secret in payload]
    assert leaks == []
    stored = [path for path in files_under(relay_files) for s in SECRETS if s in path.read_bytes()]
    assert stored == []
    assert files_under(relay_files / "nats" / "jetstream")  # the buffer is on disk, sealed

    # The machine comes back with another identity key: the client refuses it.
    identity = MachineIdentity(rig.config.config_dir / "certs")
    identity.e2e_key_file.unlink()
    await rig.start_daemon()
    refused = await user.run("--machine", MACHINE, "sessions", "list")
    assert refused.code == 3
    assert "HAS CHANGED" in refused.err
    # Re-pinned only with the fingerprint the machine shows; a wrong one changes nothing.
    wrong = await user.run("machine", "trust", MACHINE, "--fingerprint", pinned.group(1))
    assert wrong.code == 3, wrong.err
    assert "NOT trusted" in wrong.err
    assert (await user.run("--machine", MACHINE, "sessions", "list")).code == 3
    new = await machine_fingerprint(rig)
    assert new != pinned.group(1)
    trusted = await user.run("machine", "trust", MACHINE, "--fingerprint", new)
    assert trusted.code == 0, trusted.err
    listed = await user.run("--machine", MACHINE, "sessions", "list")
    assert listed.code == 0, listed.err


async def machine_fingerprint(rig: Rig) -> str:
    """As `betcode daemon status` shows it on the machine."""
    env = dict(os.environ, BETCODE_CONFIG_DIR=str(rig.config.config_dir))
    process = await asyncio.create_subprocess_exec(
        *betcode_argv("daemon", "status", "--socket", str(rig.config.socket_path)),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    shown = re.search(r"end-to-end key fingerprint \(relay clients\): (\S+)", out.decode())
    assert shown is not None, out.decode()
    return shown.group(1)
