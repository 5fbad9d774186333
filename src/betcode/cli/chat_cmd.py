"""`betcode chat`: the full-screen client (the app itself lives in cli/chat/)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from betcode.cli.chat import ChatOptions, NoSessionToContinue, run_chat
from betcode.cli.connection import DaemonError


@click.command("chat")
@click.option("--session", "session_id", help="Attach to this session.")
@click.option("--continue", "continue_last", is_flag=True, help="Reattach the latest session here.")
@click.option("--cwd", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--model", default="", help="Model for a new session.")
@click.option("--socket", "socket_path", help="Daemon socket.")
def chat(
    session_id: str | None,
    continue_last: bool,
    cwd: Path | None,
    model: str,
    socket_path: str | None,
) -> None:
    """Chat with a session; quitting leaves it running in the daemon."""
    options = ChatOptions(
        socket=socket_path, session_id=session_id, continue_last=continue_last, cwd=cwd, model=model
    )
    try:
        sys.exit(run_chat(options))
    except (DaemonError, NoSessionToContinue) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(getattr(error, "exit_code", 1))
