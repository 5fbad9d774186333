"""`betcode chat`: the full-screen client (the app itself lives in cli/chat/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from betcode.cli.chat import ChatOptions, NoSessionToContinue, run_chat
from betcode.cli.connection import DaemonError, DaemonUnavailable
from betcode.cli.ids import SESSIONS, WORKTREES
from betcode.cli.relay_login import machine_directory

START_DAEMON_QUESTION = "Start the BetCode daemon now?"


@click.command("chat")
@click.argument("prompt", required=False, default="")
@click.option(
    "--session",
    "session_id",
    shell_complete=SESSIONS.complete,
    help="Attach to this session (id, unique prefix or name).",
)
@click.option("--continue", "continue_last", is_flag=True, help="Reattach the latest session here.")
@click.option(
    "--cwd",
    callback=machine_directory,
    help="Working directory (through a relay: an absolute path on the machine).",
)
@click.option("--model", default="", help="Model for a new session.")
@click.option(
    "--worktree",
    default="",
    shell_complete=WORKTREES.complete,
    help="Chat in this git worktree, resuming its latest session (the worktree is created in "
    "the repository here if it does not exist).",
)
@click.option("--socket", "socket_path", help="Daemon socket.")
def chat(
    prompt: str,
    session_id: str | None,
    continue_last: bool,
    cwd: str | None,
    model: str,
    worktree: str,
    socket_path: str | None,
) -> None:
    """Chat with a session, sending PROMPT first if given; quitting leaves the session running
    in the daemon.

    With no daemon running, it offers to start one (at a terminal; otherwise it exits 2)."""
    options = ChatOptions(
        socket=socket_path,
        session_id=session_id,
        continue_last=continue_last,
        cwd=Path(cwd) if cwd else None,
        model=model,
        first_message=prompt,
        worktree=worktree,
    )
    try:
        sys.exit(run_offering_to_start_daemon(options))
    except (DaemonError, NoSessionToContinue) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(getattr(error, "exit_code", 1))


def run_offering_to_start_daemon(options: ChatOptions) -> int:
    """Runs the chat. When no daemon listens, a person at a terminal is asked whether to start
    one (then the chat opens); scripts get DaemonUnavailable (exit 2) as before."""
    try:
        return run_chat(options)
    except DaemonUnavailable as error:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise
        click.echo(str(error))
        if not click.confirm(START_DAEMON_QUESTION, default=True) or not start_daemon(options):
            return error.exit_code
    return run_chat(options)


def start_daemon(options: ChatOptions) -> bool:
    """`betcode daemon start` (detached; back once it listens); it says itself how it went."""
    argv = [sys.executable, "-m", "betcode.cli.main", "daemon", "start"]
    if options.socket:
        argv += ["--socket", options.socket]
    return subprocess.run(argv, check=False).returncode == 0
