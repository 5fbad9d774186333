"""`betcode web`: the link to the web client the daemon serves, and `web rotate-token`."""

from __future__ import annotations

import sys
import webbrowser
from pathlib import Path

import click

from betcode.cli.paths import resolve_paths
from betcode.config.dirs import config_dir
from betcode.web.server import address_path
from betcode.web.token import read_or_create_token, rotate_token, token_path

NOT_SERVING = (
    "the daemon serves no web client (no {path}); start it with "
    "`betcode daemon start --http 127.0.0.1:PORT` or set daemon.http.listen"
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
    """Print the web client's link (with the access token) and open it in a browser."""
    if ctx.invoked_subcommand is not None:
        return
    path = address_path(resolve_paths(None, data_dir).data_dir)
    try:
        base = path.read_text().strip()
    except FileNotFoundError:
        click.echo(f"betcode web: {NOT_SERVING.format(path=path)}", err=True)
        sys.exit(1)
    url = f"{base}/?token={read_or_create_token(config_dir())}"
    click.echo(url)
    if not print_url and webbrowser.open(url):
        click.echo("opened in the default browser", err=True)


@web_group.command("rotate-token")
def rotate() -> None:
    """Replace the access token: every browser must open a new `betcode web` link."""
    rotate_token(config_dir())
    click.echo(
        f"new access token written to {token_path(config_dir())}; old links and "
        "cookies no longer work"
    )
