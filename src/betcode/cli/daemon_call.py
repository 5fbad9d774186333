"""One request to the daemon on a fresh connection, for the short `betcode` commands: a failure
prints one clear line and exits with its code (docs/CLI.md#exit-codes)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from betcode.cli.connection import (
    DaemonClient,
    DaemonError,
    RequestQueued,
    resolve_daemon_address,
)

T = TypeVar("T")

socket_option = click.option(
    "--socket",
    "socket_path",
    help="The daemon's socket (default: $BETCODE_SOCKET, then the usual place).",
)


def call_daemon(socket_path: str | None, action: Callable[[DaemonClient], Awaitable[T]]) -> T:
    """Run `action` with a client of the daemon at `socket_path` (or the default place)."""

    async def run() -> T:
        async with await DaemonClient.connect(resolve_daemon_address(socket_path)) as client:
            return await action(client)

    try:
        return asyncio.run(run())
    except RequestQueued as queued:
        click.echo(str(queued))
        sys.exit(queued.exit_code)
    except DaemonError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(error.exit_code)
