"""`betcode web`: a one-time sign-in link to the web client the daemon serves; `web pair`, a
pairing code and its QR code for a phone (through the machine's relay when it has one:
cli/relay_pairing.py); the signed-in devices (`web devices`, `web revoke ID`)
and `web rotate-token` (docs/WEB.md "Access").

Links, pairing codes and the devices are asked of the daemon on its own socket
(WebAccessService: owner-only by the socket's permissions), so they work whether or not the web
client has a LAN address (a daemon that only dials a relay has none). The web address, when
there is one, comes from the daemon's own 0600 file; `rotate-token` tells the daemon there with
the new token. An https address on a loopback name is not verified against a CA: nothing but a
local process can listen on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import sys
import time
import urllib.request
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import click
import grpc
import grpc.aio

from betcode.cli.health import ask_health
from betcode.cli.paths import resolve_paths
from betcode.cli.relay_pairing import (
    TicketUnavailable,
    browser_address,
    machine_key,
    pairing_ticket,
    pairing_url,
    typed_form,
)
from betcode.config.addresses import is_loopback_host
from betcode.config.dirs import config_dir
from betcode.remote.e2e import fingerprint
from betcode.storage.data_dir_lock import data_dir_holder
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import web_access_pb2, web_access_pb2_grpc
from betcode.web.server import address_path
from betcode.web.token import read_or_create_token, rotate_token, token_path

LOOPBACK_HINT = (
    "A phone cannot open {url}: it is loopback, this machine only. Serve a reachable address "
    "(daemon start --http HOST:PORT --http-tls-cert C --http-tls-key K) or give the address the "
    "phone reaches as --base-url (docs/WEB.md)."
)
RELAY_LOOPBACK_HINT = (
    "A phone cannot open {url}: this machine was registered with the relay at a loopback "
    "address. Give the address the phone reaches the relay by as --base-url "
    "(docs/RELAY.md)."
)
START_HINT = "start it with `betcode daemon start --http 127.0.0.1:PORT` or set daemon.http.listen"
NOT_SERVING = "the daemon serves no web client (no {path}); " + START_HINT
NO_DAEMON = (
    "no daemon runs on the data dir {data_dir} ({path} is left from one that stopped "
    "without removing it); " + START_HINT
)
WEB_COMPONENT = "web"  # its name in the daemon's health details
STOPPED_SERVING = "the daemon on {socket} serves no web client now; " + START_HINT
NO_WEB_CLIENT = (
    "the daemon on {socket} serves no web client (no LAN address, no relay); " + START_HINT
)


@click.group("web", invoke_without_command=True)
@click.option("--print-url", is_flag=True, help="Only print the link; do not open a browser.")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    help="The daemon's data dir (env BETCODE_DATA_DIR).",
)
@click.pass_context
def web_group(ctx: click.Context, print_url: bool, data_dir: Path | None) -> None:
    """Print a one-time sign-in link to the web client and open it in a browser."""
    ctx.obj = data_dir
    if ctx.invoked_subcommand is not None:
        return
    base = _live_address(resolve_paths(None, data_dir).data_dir)
    made = _sign_in(data_dir, web_access_pb2.SIGN_IN_KIND_LINK)
    url = f"{base}/#link={made.secret}"
    click.echo(url)
    minutes = max(1, round((made.expires_at - time.time()) / 60))
    click.echo(f"the link signs in one browser, once, within {minutes} minutes", err=True)
    if not print_url and webbrowser.open(url):
        click.echo("opened in the default browser", err=True)


def _owner_call(
    data_dir: Path | None, action: Callable[[web_access_pb2_grpc.WebAccessServiceStub], Any]
) -> Any:
    """One WebAccessService call on the daemon's socket (the owner's, by its permissions); a
    refusal ends the command with the daemon's message."""
    resolved = resolve_paths(None, data_dir).data_dir
    holder = data_dir_holder(resolved)
    socket = holder.get("socket") if holder is not None else None
    if not isinstance(socket, str):
        _fail(f"no daemon runs on the data dir {resolved}; " + START_HINT)

    async def call() -> Any:
        async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
            return await action(web_access_pb2_grpc.WebAccessServiceStub(channel))

    try:
        return asyncio.run(call())
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.UNIMPLEMENTED:
            _fail(NO_WEB_CLIENT.format(socket=socket))
        _fail(error.details() or f"the daemon answered {error.code().name}")


def _sign_in(data_dir: Path | None, kind: int) -> web_access_pb2.CreateSignInResponse:
    request = web_access_pb2.CreateSignInRequest(kind=kind)  # type: ignore[arg-type]
    made: web_access_pb2.CreateSignInResponse = _owner_call(
        data_dir, lambda stub: stub.CreateSignIn(request, timeout=30)
    )
    return made


def _owner_request(base: str, method: str, path: str) -> dict[str, Any]:
    request = urllib.request.Request(
        base + path,
        method=method,
        headers={"Authorization": f"Bearer {read_or_create_token(config_dir())}"},
    )
    with urllib.request.urlopen(request, timeout=30, context=_tls_for(base)) as response:
        return dict(json.load(response))


def _on_loopback(url: str) -> bool:
    try:
        return is_loopback_host(urlsplit(url).hostname or "")
    except ValueError:  # a name other than localhost
        return False


def _tls_for(base: str) -> ssl.SSLContext | None:
    if urlsplit(base).scheme != "https":
        return None
    context = ssl.create_default_context()
    if _on_loopback(base):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _live_address(data_dir: Path) -> str:
    """The web client's base URL, checked against the daemon itself: a daemon killed with
    SIGKILL leaves its address file behind, a dead link."""
    path = address_path(data_dir)
    try:
        base = path.read_text().strip()
    except FileNotFoundError:
        _fail(NOT_SERVING.format(path=path))
    holder = data_dir_holder(data_dir)
    if holder is None:
        _fail(NO_DAEMON.format(data_dir=data_dir, path=path))
    # A daemon that answers lists the web client among its components while it serves it
    # (one started without --http after a killed one that had it did not write the file).
    socket = holder.get("socket")
    health = ask_health(Path(socket)) if isinstance(socket, str) else None
    if health is not None and not any(c.name == WEB_COMPONENT for c in health.components):
        _fail(STOPPED_SERVING.format(socket=socket))
    return base


def _fail(message: str) -> NoReturn:
    click.echo(f"betcode web: {message}", err=True)
    sys.exit(1)


@web_group.command("pair")
@click.option(
    "--base-url",
    help="The address the phone opens, when not the daemon's (or the relay's) own.",
)
@click.option(
    "--relay/--lan",
    "through_relay",
    default=None,
    help="Pair through the relay this machine is registered with (the default when it is), "
    "or directly with the daemon's web address.",
)
@click.pass_obj
def pair(data_dir: Path | None, base_url: str | None, through_relay: bool | None) -> None:
    """Sign a phone in: a QR code to scan, or a short code to type on the page's sign-in screen."""
    import segno  # only this command draws a QR code

    identity = MachineIdentity(config_dir() / "certs")
    relay = identity.relay() if identity.exists() else None
    if through_relay and relay is None:
        _fail(
            "this machine is not registered with a relay (or was before the relay's address "
            "was remembered): run `betcode --relay URL machine register --id ID`, or pair on "
            "the LAN with --lan"
        )
    pair_at_relay = relay is not None and through_relay is not False
    # The LAN's address first: a daemon without one is told before a code is made.
    base = "" if pair_at_relay else _live_address(resolve_paths(None, data_dir).data_dir)
    made = _sign_in(data_dir, web_access_pb2.SIGN_IN_KIND_PAIRING_CODE)
    minutes = max(1, round((made.expires_at - time.time()) / 60))
    code = made.secret.replace("-", "")
    if relay is not None and pair_at_relay:
        try:
            ticket = pairing_ticket(identity, relay)
        except TicketUnavailable as error:
            _fail(f"{error}; pair on the LAN with --lan")
        shown = (base_url or browser_address(relay.url)).rstrip("/")
        key = machine_key(identity)
        url = pairing_url(shown, ticket.ticket, code, ticket.machine_id, key)
        typed = typed_form(ticket.ticket, code)
        where = f"through the relay, to machine {ticket.machine_id}"
    else:
        shown = (base_url or base).rstrip("/")
        url = f"{shown}/#code={code}"
        typed = made.secret
        where = ""
    segno.make(url, error="m").terminal(out=sys.stdout, compact=True)
    click.echo(f"\nScan it, or open {shown} and type the code:\n\n    {typed}\n")
    if where:
        click.echo(f"It signs in one browser {where}, once, within {minutes} minutes.")
        click.echo(f"The machine's key fingerprint: {fingerprint(key)}")
    else:
        click.echo(f"It signs in one browser, once, within {minutes} minutes.")
    if _on_loopback(shown):
        click.echo((RELAY_LOOPBACK_HINT if where else LOOPBACK_HINT).format(url=shown))


@web_group.command("devices")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_obj
def devices(data_dir: Path | None, as_json: bool) -> None:
    """List the browsers signed in to the web client (and those revoked)."""
    request = web_access_pb2.ListWebDevicesRequest()
    reply: web_access_pb2.ListWebDevicesResponse = _owner_call(
        data_dir, lambda stub: stub.ListWebDevices(request, timeout=30)
    )
    if as_json:
        listed = [
            {
                "device_id": device.device_id,
                "name": device.name,
                "created_at": device.created_at,
                "last_seen_at": device.last_seen_at or None,
                "revoked_at": device.revoked_at or None,
                "signed_in": device.signed_in,
            }
            for device in reply.devices
        ]
        click.echo(json.dumps(listed, indent=2))
        return
    if not reply.devices:
        click.echo("No devices: `betcode web` prints a link that signs one in.")
    for device in reply.devices:
        state = "signed in" if device.signed_in else "signed out"
        seen = device.last_seen_at
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(seen)) if seen else "never"
        click.echo(f"{device.device_id}  {state:10}  last seen {when}  {device.name}")


@web_group.command("revoke")
@click.argument("device_id")
@click.pass_obj
def revoke(data_dir: Path | None, device_id: str) -> None:
    """Sign a device out: its open pages are closed at once."""
    request = web_access_pb2.RevokeWebDeviceRequest(device_id=device_id)
    _owner_call(data_dir, lambda stub: stub.RevokeWebDevice(request, timeout=30))
    click.echo(f"{device_id} revoked; its open pages were closed")


@web_group.command("rotate-token")
@click.pass_obj
def rotate(data_dir: Path | None) -> None:
    """Replace the access token: every device is signed out, its pages closed."""
    rotate_token(config_dir())
    click.echo(
        f"new access token written to {token_path(config_dir())}; every device is signed "
        "out and unused links no longer work"
    )
    # A serving daemon closes every page now; it would within a second anyway (it watches the
    # token file), so a daemon that cannot be told is no failure.
    address = address_path(resolve_paths(None, data_dir).data_dir)
    with contextlib.suppress(OSError, ValueError):
        _owner_request(address.read_text().strip(), "POST", "/api/rotate")
