"""`betcode web pair` on a relay rig's machine, as its owner runs it there: what it printed, and
the pairing link its QR code draws (checked module by module)."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass

from betcode.remote import e2e
from betcode.tunnel.identity import MachineIdentity, RelayAddress
from harness.qr import draws
from harness.relay import MACHINE, Rig


def remember_relay(rig: Rig) -> str:
    """Stores the relay's client address with the machine's identity, as `machine register`
    does; the address."""
    identity = MachineIdentity(rig.config.config_dir / "certs")
    relay_url = f"https://127.0.0.1:{rig.relay.port}"
    identity.store(
        MACHINE,
        MACHINE,
        identity.cert_file.read_text(),
        identity.ca_file.read_text(),
        RelayAddress(relay_url, str(rig.relay.options.files.ca_cert)),
    )
    return relay_url


async def web_pair(rig: Rig, *args: str) -> tuple[int, str, str]:
    """`betcode web pair ARGS` on the daemon's machine: (exit code, stdout, stderr)."""
    return await web_command(rig, "pair", *args)


async def web_command(rig: Rig, *args: str) -> tuple[int, str, str]:
    """`betcode web ARGS` on the daemon's machine, as its owner: (exit code, stdout, stderr)."""
    env = {
        **os.environ,
        "BETCODE_CONFIG_DIR": str(rig.config.config_dir),
        "BETCODE_DATA_DIR": str(rig.config.data_dir),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "betcode.cli.main", "web", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@dataclass(frozen=True)
class RelayPairing:
    url: str  # what the QR code draws
    ticket: str
    code: str
    text: str  # what `web pair` said under the QR code


async def relay_pairing(rig: Rig, relay_url: str) -> RelayPairing:
    """`betcode web pair` through the relay: its link, read back from the typed form and checked
    to be exactly what the QR code draws."""
    code, out, err = await web_pair(rig)
    assert code == 0, err
    qr_part, _, text = out.partition("\n\n")
    typed = text.split("type the code:", 1)[1].split()[0].replace("-", "")
    ticket, daemon_code = typed[:10], typed[10:]
    key_file = MachineIdentity(rig.config.config_dir / "certs").e2e_key_file
    key = e2e.DaemonIdentity.load_or_create(key_file).public
    url = f"{relay_url}/#pair={ticket}.{daemon_code}&machine={MACHINE}&key={key.hex()}"
    assert draws(qr_part, url)
    return RelayPairing(url, ticket, daemon_code, text)
