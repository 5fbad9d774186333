"""`betcode --relay URL machine register|list|switch|status|dropped|remove|trust`."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import click
import grpc.aio

from betcode.cli.relay_call import call_relay, required_relay
from betcode.cli.relay_login import StoredLogin, access_token
from betcode.config.dirs import config_dir
from betcode.config.keys import set_dotted
from betcode.config.layers import SETTINGS_FILE, read_settings_file
from betcode.relay.machine_service import CA_KEY, CERTIFICATE_KEY, CSR_KEY, TUNNEL_PORT_KEY
from betcode.tunnel.identity import MachineIdentity, RelayAddress
from betcode.v1 import machine_pb2, machine_pb2_grpc

STATUS_NAMES = {
    machine_pb2.MACHINE_STATUS_ONLINE: "online",
    machine_pb2.MACHINE_STATUS_OFFLINE: "offline",
}


@click.group("machine")
def machine_group() -> None:
    """This user's machines on the relay."""


def _auth(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


@machine_group.command("register")
@click.option("--id", "machine_id", required=True, help="This machine's id on the relay.")
@click.option("--name", default="", help="A name to show (default: the id).")
def register(machine_id: str, name: str) -> None:
    """Register THIS machine; its certificate is stored in <config dir>/certs (0600)."""
    choice = required_relay()
    identity = MachineIdentity(config_dir() / "certs")

    async def action(channel: grpc.aio.Channel) -> machine_pb2.MachineInfo:
        token = await access_token(channel, choice)
        request = machine_pb2.RegisterMachineRequest(
            machine_id=machine_id,
            name=name or machine_id,
            metadata={CSR_KEY: identity.new_request(machine_id).decode()},
        )
        response: machine_pb2.RegisterMachineResponse = await machine_pb2_grpc.MachineServiceStub(
            channel
        ).RegisterMachine(request, metadata=_auth(token), timeout=30)
        return response.machine

    machine = call_relay(choice, action)
    identity.store(
        machine.machine_id,
        machine.name,
        machine.metadata[CERTIFICATE_KEY],
        machine.metadata[CA_KEY],
        RelayAddress(choice.url, str(choice.ca_file.resolve()) if choice.ca_file else ""),
    )
    click.echo(f"machine {machine.machine_id} registered; certificate in {identity.cert_file}")
    tunnel_port = machine.metadata.get(TUNNEL_PORT_KEY)
    if tunnel_port:
        url = remember_relay_for_daemon(choice.url, tunnel_port)
        click.echo(
            f"the daemon here dials {url} (daemon.relay.urls in {config_dir() / SETTINGS_FILE});"
            " (re)start it: betcode daemon restart"
        )


def remember_relay_for_daemon(client_url: str, tunnel_port: str) -> str:
    """Stores the relay's daemon address in this machine's settings (`daemon.relay.urls`):
    the host the client dialed, the port the relay gave for daemons. A plain `daemon start`
    then dials it; the relay's CA was stored with the certificate."""
    host = urlsplit(client_url if "://" in client_url else f"https://{client_url}").hostname
    url = f"https://{host}:{tunnel_port}"
    path = config_dir() / SETTINGS_FILE
    data = read_settings_file(path) or {}
    set_dotted(data, "daemon.relay.urls", [url])
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return url


def _list() -> list[machine_pb2.MachineInfo]:
    choice = required_relay()

    async def action(channel: grpc.aio.Channel) -> list[machine_pb2.MachineInfo]:
        token = await access_token(channel, choice)
        response: machine_pb2.ListMachinesResponse = await machine_pb2_grpc.MachineServiceStub(
            channel
        ).ListMachines(machine_pb2.ListMachinesRequest(), metadata=_auth(token), timeout=30)
        return list(response.machines)

    return call_relay(choice, action)


@machine_group.command("list")
def list_machines() -> None:
    """Your machines and whether each is online."""
    active = StoredLogin.load().active_machine
    machines = _list()
    if not machines:
        click.echo("no machines; register one with `betcode machine register --id ID`")
        return
    for machine in machines:
        mark = "*" if machine.machine_id == active else " "
        status = STATUS_NAMES.get(machine.status, "unknown")
        click.echo(f"{mark} {machine.machine_id:<24} {status:<8} {machine.name}")


@machine_group.command("switch")
@click.argument("machine_id")
def switch(machine_id: str) -> None:
    """Make MACHINE_ID the one daemon-facing commands use (instead of --machine)."""
    if machine_id not in {m.machine_id for m in _list()}:
        raise click.ClickException(
            f"no machine {machine_id!r} among yours (`betcode machine list`)"
        )
    stored = StoredLogin.load()
    stored.active_machine = machine_id
    stored.save()
    click.echo(f"active machine: {machine_id}")


@machine_group.command("status")
def status() -> None:
    """The active machine and whether it is online."""
    stored = StoredLogin.load()
    if not stored.active_machine:
        click.echo("no active machine (`betcode machine switch ID`)")
        raise SystemExit(1)
    for machine in _list():
        if machine.machine_id == stored.active_machine:
            status_name = STATUS_NAMES.get(machine.status, "unknown")
            click.echo(f"{machine.machine_id}: {status_name} ({machine.name})")
            return
    raise click.ClickException(f"machine {stored.active_machine} is no longer registered")


@machine_group.command("dropped")
@click.argument("machine_id")
def dropped(machine_id: str) -> None:
    """Requests queued for MACHINE_ID while it was offline that it refused once back (the
    relay dropped them), newest first, each with the place its queuing printed."""
    choice = required_relay()

    async def action(channel: grpc.aio.Channel) -> list[machine_pb2.DroppedRequest]:
        token = await access_token(channel, choice)
        response: machine_pb2.ListDroppedRequestsResponse = await (
            machine_pb2_grpc.MachineServiceStub(channel).ListDroppedRequests(
                machine_pb2.ListDroppedRequestsRequest(machine_id=machine_id),
                metadata=_auth(token),
                timeout=30,
            )
        )
        return list(response.dropped)

    found = call_relay(choice, action)
    if not found:
        click.echo(f"no queued request for {machine_id} was refused")
        return
    for request in found:
        when = request.dropped_at.ToDatetime().strftime("%Y-%m-%d %H:%M:%S")
        method = request.method.rsplit("/", 1)[-1]
        click.echo(f"place {request.place}  {when} UTC  {method}: {request.code}: {request.reason}")


@machine_group.command("remove")
@click.argument("machine_id")
def remove(machine_id: str) -> None:
    """Remove one of your machines from the relay (its certificate stops working)."""
    choice = required_relay()

    async def action(channel: grpc.aio.Channel) -> None:
        token = await access_token(channel, choice)
        await machine_pb2_grpc.MachineServiceStub(channel).RemoveMachine(
            machine_pb2.RemoveMachineRequest(machine_id=machine_id),
            metadata=_auth(token),
            timeout=30,
        )

    call_relay(choice, action)
    click.echo(f"machine {machine_id} removed")


@machine_group.command("trust")
@click.argument("machine_id")
@click.option(
    "--fingerprint",
    "expected",
    required=True,
    help="The fingerprint `betcode daemon status` shows on the machine.",
)
def trust_command(machine_id: str, expected: str) -> None:
    """Pin MACHINE_ID's end-to-end key again, after it changed on purpose (reinstalled): the
    key the machine presents now must have the fingerprint read on the machine itself."""
    from betcode.cli.relay_e2e import FingerprintChanged, trust
    from betcode.remote.e2e import fingerprint
    from betcode.v1 import agent_pb2_grpc, tunnel_pb2

    choice = required_relay()

    async def action(channel: grpc.aio.Channel) -> bytes:
        token = await access_token(channel, choice)
        response = await agent_pb2_grpc.AgentServiceStub(channel).ExchangeKeys(
            tunnel_pb2.KeyExchangeRequest(machine_id=machine_id),
            metadata=(*_auth(token), ("x-machine-id", machine_id)),
            timeout=30,
        )
        return bytes(response.daemon_identity_pubkey)

    key = call_relay(choice, action)
    presented = fingerprint(key)
    if presented != expected.strip().lower():
        raise FingerprintChanged(
            f"machine {machine_id} presents the key {presented}, not {expected}: NOT trusted. "
            "Read the fingerprint again with `betcode daemon status` on the machine; if they "
            "differ, someone may be intercepting the relay."
        )
    trust(machine_id, key)
    click.echo(f"machine {machine_id}'s key {presented} is trusted")
