"""`betcode relay init|start|invite`: run a relay (accounts, machines, routing over NATS)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import sys
import time
from dataclasses import replace
from pathlib import Path

import click

from betcode.relay.accounts import Accounts, open_database
from betcode.relay.auth_service import Registration, invite_hash
from betcode.relay.buffer import BufferSettings
from betcode.relay.front import ListenRefused
from betcode.relay.layout import RelayFiles, RelayNotInitialized, default_relay_dir, init_relay
from betcode.relay.machine_service import DEFAULT_MACHINES_PER_USER
from betcode.relay.nats_server import NatsRefused, NatsUnavailable
from betcode.relay.notifications import NotifySettings
from betcode.relay.push_delivery import PushRelaySettings
from betcode.relay.server import (
    DEFAULT_LISTEN,
    DEFAULT_TUNNEL_LISTEN,
    RelayOptions,
    run_relay,
)

dir_option = click.option(
    "--dir",
    "relay_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="The relay's files (default: <config dir>/relay).",
)


@click.group("relay")
def relay_group() -> None:
    """Run a relay that reaches daemons on other machines."""


@relay_group.command("init")
@dir_option
@click.option("--host", "hosts", multiple=True, required=True, help="A name clients dial (repeat).")
@click.option("--force", is_flag=True, help="Replace an existing CA (every machine re-registers).")
def init(relay_dir: Path | None, hosts: tuple[str, ...], force: bool) -> None:
    """Create the relay's CA, server certificate, JWT key and config (files 0600)."""
    files = RelayFiles(relay_dir or default_relay_dir())
    try:
        init_relay(files, hosts, force=force)
    except FileExistsError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"relay files in {files.root}")
    click.echo(
        f"CA certificate (give to clients and daemons as --relay-custom-ca-cert): {files.ca_cert}"
    )


@relay_group.command("start")
@dir_option
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    help="HOST:PORT of the relay's one client address: gRPC clients and browsers (TLS).",
)
@click.option(
    "--tunnel-listen",
    default=DEFAULT_TUNNEL_LISTEN,
    show_default=True,
    help="HOST:PORT daemons dial (mTLS with their machine certificate).",
)
@click.option("--tls-cert", type=click.Path(path_type=Path, exists=True), help="Server cert.")
@click.option("--tls-key", type=click.Path(path_type=Path, exists=True), help="Its key.")
@click.option(
    "--nats",
    "nats_urls",
    multiple=True,
    help="A NATS server of a shared cluster (repeat): nats://USER:PASSWORD@HOST:PORT, "
    "tls://... for another host.",
)
@click.option(
    "--nats-creds",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="A NATS credentials file (JWT + nkey seed) instead of a password in the URLs.",
)
@click.option(
    "--nats-ca",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="The CA certificate of tls:// NATS servers.",
)
@click.option("--database-url", help="PostgreSQL URL shared by every relay instance.")
@click.option("--relay-id", help="This instance's name (default: random).")
@click.option(
    "--notify-webhook",
    metavar="URL",
    help="POST attention notifications here (ntfy-style; 5/h per session, 20/day per user).",
)
@click.option(
    "--buffer-ttl",
    type=click.FloatRange(1, 30 * 24 * 3600),
    default=BufferSettings.ttl_seconds,
    show_default=True,
    help="Seconds a request for an offline machine is kept.",
)
@click.option(
    "--buffer-cap",
    type=click.IntRange(1, 10_000),
    default=BufferSettings.max_per_machine,
    show_default=True,
    help="Requests kept per offline machine (beyond: RESOURCE_EXHAUSTED, BUFFER_FULL).",
)
@click.option(
    "--buffer-cap-per-user",
    type=click.IntRange(1, 1_000_000),
    default=BufferSettings.max_per_user,
    show_default=True,
    help="Requests kept for all of a user's offline machines (beyond: BUFFER_QUOTA).",
)
@click.option(
    "--buffer-bytes-per-user",
    type=click.IntRange(1024 * 1024, 1 << 40),
    default=BufferSettings.max_bytes_per_user,
    show_default=True,
    help="Bytes kept for all of a user's offline machines (beyond: BUFFER_QUOTA).",
)
@click.option(
    "--registration",
    type=click.Choice([mode.value for mode in Registration]),
    default=Registration.INVITE.value,
    show_default=True,
    help="Who may create an account: anyone; the first account (the owner) freely and the "
    "others with a code from `betcode relay invite`; nobody.",
)
@click.option(
    "--machines-per-user",
    type=click.IntRange(1, 10_000),
    default=DEFAULT_MACHINES_PER_USER,
    show_default=True,
    help="Machines one user may register.",
)
@click.option(
    "--push-allow-loopback",
    is_flag=True,
    help="Also deliver Web Push to http://127.0.0.1:PORT push services (tests, one on this "
    "host); else https only.",
)
def start(
    relay_dir: Path | None,
    listen: str,
    tunnel_listen: str,
    tls_cert: Path | None,
    tls_key: Path | None,
    nats_urls: tuple[str, ...],
    nats_creds: Path | None,
    nats_ca: Path | None,
    database_url: str | None,
    relay_id: str | None,
    notify_webhook: str | None,
    buffer_ttl: float,
    buffer_cap: int,
    buffer_cap_per_user: int,
    buffer_bytes_per_user: int,
    registration: str,
    machines_per_user: int,
    push_allow_loopback: bool,
) -> None:
    """Serve the relay until SIGTERM/SIGINT (without --nats, with its own NATS server)."""
    files = RelayFiles(relay_dir or default_relay_dir())
    try:
        files.require()
    except RelayNotInitialized as error:
        raise click.ClickException(str(error)) from None
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = RelayOptions(
        files,
        listen=listen,
        tunnel_listen=tunnel_listen,
        nats_urls=nats_urls,
        nats_credentials_file=nats_creds,
        nats_ca=nats_ca,
        database_url=database_url,
        tls=(tls_cert, tls_key) if tls_cert and tls_key else None,
        buffer=BufferSettings(
            ttl_seconds=buffer_ttl,
            max_per_machine=buffer_cap,
            max_per_user=buffer_cap_per_user,
            max_bytes_per_user=buffer_bytes_per_user,
        ),
        registration=Registration(registration),
        machines_per_user=machines_per_user,
        notify=NotifySettings(webhook=notify_webhook or ""),
        push=PushRelaySettings(allow_loopback=push_allow_loopback),
    )
    if relay_id:
        options = replace(options, relay_id=relay_id)
    try:
        code = asyncio.run(run_relay(options))
    except (NatsRefused, NatsUnavailable, ListenRefused) as error:
        raise click.ClickException(str(error)) from None
    sys.exit(code)


@relay_group.command("invite")
@dir_option
@click.option("--database-url", help="The PostgreSQL URL the relay instances share.")
@click.option(
    "--uses", type=click.IntRange(1, 1000), default=1, show_default=True, help="Accounts it makes."
)
@click.option(
    "--days",
    type=click.FloatRange(0.01, 365),
    default=7.0,
    show_default=True,
    help="Days it stays valid.",
)
def invite(relay_dir: Path | None, database_url: str | None, uses: int, days: float) -> None:
    """Make an invitation code for `betcode auth register --invite CODE` (run on the relay's
    host: it writes to the relay's accounts database; only its hash is kept)."""
    files = RelayFiles(relay_dir or default_relay_dir())
    try:
        files.require()
    except RelayNotInitialized as error:
        raise click.ClickException(str(error)) from None
    code = secrets.token_urlsafe(18)

    async def add() -> None:
        database = await open_database(database_url, files.accounts_db)
        try:
            now = time.time()
            await Accounts(database).add_invite(invite_hash(code), now, now + days * 86400, uses)
        finally:
            await database.close()

    asyncio.run(add())
    click.echo(code)
    click.echo(
        f"(valid {days:g} days, for {uses} account(s): betcode auth register --invite {code})",
        err=True,
    )
