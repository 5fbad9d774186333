"""`betcode --relay URL auth register|login|logout|status|devices|revoke`: an account on a relay;
tokens are kept in <config dir>/auth.json (0600). The devices are the phones paired through the
relay (`betcode web pair`), each a login of the account for one machine."""

from __future__ import annotations

import time

import click
import grpc.aio

from betcode.cli.relay_call import call_relay, required_relay
from betcode.cli.relay_login import StoredLogin, access_token, auth_file
from betcode.v1 import auth_pb2, auth_pb2_grpc

password_option = click.option(
    "-p",
    "--password",
    envvar="BETCODE_PASSWORD",
    prompt=True,
    hide_input=True,
    help="The password (env BETCODE_PASSWORD; asked when missing).",
)


@click.group("auth")
def auth_group() -> None:
    """Log in to a relay."""


def _remember(username: str, login: auth_pb2.RegisterResponse | auth_pb2.LoginResponse) -> None:
    """Keeps a register's or login's tokens (both answers carry the same fields)."""
    choice = required_relay()
    stored = StoredLogin.load()
    if stored.relay_url != choice.url:
        stored = StoredLogin()  # another relay: its machine choice does not carry over
    stored.relay_url = choice.url
    stored.ca_file = str(choice.ca_file.absolute()) if choice.ca_file else ""
    stored.username = username
    stored.user_id = login.user_id
    stored.set_tokens(login.access_token, login.refresh_token, login.expires_in_secs)
    stored.save()


@auth_group.command("register")
@click.option("-u", "--username", required=True)
@password_option
@click.option("-e", "--email", default="")
@click.option(
    "--invite",
    default="",
    help="An invitation code (`betcode relay invite` on the relay): needed on a relay that "
    "registers by invitation, except for its first account.",
)
def register(username: str, password: str, email: str, invite: str) -> None:
    """Create an account (and log in)."""

    async def action(channel: grpc.aio.Channel) -> auth_pb2.RegisterResponse:
        request = auth_pb2.RegisterRequest(
            username=username, password=password, email=email, invite_code=invite
        )
        response: auth_pb2.RegisterResponse = await auth_pb2_grpc.AuthServiceStub(channel).Register(
            request, timeout=30
        )
        return response

    response = call_relay(required_relay(), action)
    _remember(username, response)
    click.echo(f"registered and logged in as {username}")


@auth_group.command("login")
@click.option("-u", "--username", required=True)
@password_option
def login(username: str, password: str) -> None:
    """Log in (tokens saved in the config dir)."""

    async def action(channel: grpc.aio.Channel) -> auth_pb2.LoginResponse:
        request = auth_pb2.LoginRequest(username=username, password=password)
        response: auth_pb2.LoginResponse = await auth_pb2_grpc.AuthServiceStub(channel).Login(
            request, timeout=30
        )
        return response

    response = call_relay(required_relay(), action)
    _remember(username, response)
    click.echo(f"logged in as {username}")


@auth_group.command("logout")
def logout() -> None:
    """Revoke this login's tokens at the relay and forget them."""
    stored = StoredLogin.load()
    if not stored.refresh_token:
        click.echo("not logged in")
        return
    refresh = stored.refresh_token

    async def action(channel: grpc.aio.Channel) -> None:
        await auth_pb2_grpc.AuthServiceStub(channel).RevokeToken(
            auth_pb2.RevokeTokenRequest(refresh_token=refresh), timeout=30
        )

    call_relay(required_relay(), action)
    stored.access_token = stored.refresh_token = ""
    stored.access_expires_at = 0.0
    stored.save()
    click.echo("logged out")


@auth_group.command("status")
def status() -> None:
    """Who is logged in, to which relay."""
    stored = StoredLogin.load()
    if not stored.refresh_token:
        click.echo(f"not logged in ({auth_file()})")
        raise SystemExit(1)
    left = int(stored.access_expires_at - time.time())
    access = (
        f"access token valid {left} s more"
        if left > 0
        else "access token expired; the next command renews it"
    )
    click.echo(f"logged in to {stored.relay_url} as {stored.username} ({access})")
    if stored.active_machine:
        click.echo(f"active machine: {stored.active_machine}")


def _devices() -> list[auth_pb2.DeviceLogin]:
    choice = required_relay()

    async def action(channel: grpc.aio.Channel) -> list[auth_pb2.DeviceLogin]:
        token = await access_token(channel, choice)
        response: auth_pb2.ListDevicesResponse = await auth_pb2_grpc.AuthServiceStub(
            channel
        ).ListDevices(
            auth_pb2.ListDevicesRequest(),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=30,
        )
        return list(response.devices)

    return call_relay(choice, action)


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


@auth_group.command("devices")
def devices() -> None:
    """The phones paired through the relay (`betcode web pair`): each reaches one machine."""
    listed = _devices()
    if not listed:
        click.echo("no devices: `betcode web pair` on a machine pairs a phone through the relay")
    for device in listed:
        state = (
            f"revoked {_when(device.revoked_at.ToSeconds())}"
            if device.HasField("revoked_at")
            else "signed in"
        )
        click.echo(
            f"{device.device_id}  {device.machine_id:<16} {state:<24} "
            f"last used {_when(device.last_used_at.ToSeconds())}  {device.name}"
        )


@auth_group.command("revoke")
@click.argument("device_id")
def revoke(device_id: str) -> None:
    """Sign a paired device out: its tokens stop working at once."""
    choice = required_relay()

    async def action(channel: grpc.aio.Channel) -> None:
        token = await access_token(channel, choice)
        await auth_pb2_grpc.AuthServiceStub(channel).RevokeDevice(
            auth_pb2.RevokeDeviceRequest(device_id=device_id),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=30,
        )

    call_relay(choice, action)
    click.echo(f"device {device_id} revoked; its tokens no longer work")
