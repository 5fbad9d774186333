"""`betcode --relay URL auth register|login|logout|status`: an account on a relay; tokens are
kept in <config dir>/auth.json (0600)."""

from __future__ import annotations

import time

import click
import grpc.aio

from betcode.cli.relay_call import call_relay, required_relay
from betcode.cli.relay_login import StoredLogin, auth_file
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
