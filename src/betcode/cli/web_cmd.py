"""`betcode web`: the link to the web client the daemon serves, and `web rotate-token`."""

from __future__ import annotations

import sys
import webbrowser
from pathlib import Path
from typing import NoReturn

import click

from betcode.cli.health import ask_health
from betcode.cli.paths import resolve_paths
from betcode.config.dirs import config_dir
from betcode.storage.data_dir_lock import data_dir_holder
from betcode.web.server import address_path
from betcode.web.token import read_or_create_token, rotate_token, token_path

START_HINT = "start it with `betcode daemon start --http 127.0.0.1:PORT` or set daemon.http.listen"
NOT_SERVING = "the daemon serves no web client (no {path}); " + START_HINT
NO_DAEMON = (
    "no daemon runs on the data dir {data_dir} ({path} is left from one that stopped "
    "without removing it); " + START_HINT
)
WEB_COMPONENT = "web"  # its name in the daemon's health details
STOPPED_SERVING = "the daemon on {socket} serves no web client now; " + START_HINT


@click.group("web", invoke_without_command=True)
@click.option("--print-url", is_flag=True, help="Only print the link; do not open a browser.")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    help="The daemon's data dir (env BETCODE_DATA_DIR).",
)
@click.pass_context
def web_group(ctx: click.Context, print_url: bool, data_dir: Path | None) -> None:
    """Print the web client's link (with the access token) and open it in a browser."""
    if ctx.invoked_subcommand is not None:
        return
    base = _live_address(resolve_paths(None, data_dir).data_dir)
    url = f"{base}/?token={read_or_create_token(config_dir())}"
    click.echo(url)
    if not print_url and webbrowser.open(url):
        click.echo("opened in the default browser", err=True)


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


@web_group.command("rotate-token")
def rotate() -> None:
    """Replace the access token: every browser must open a new `betcode web` link."""
    rotate_token(config_dir())
    click.echo(
        f"new access token written to {token_path(config_dir())}; old links and "
        "cookies no longer work"
    )
