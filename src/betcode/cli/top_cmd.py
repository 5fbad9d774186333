"""`betcode top [--all] [--json]`: the task board of the daemon's sessions (or one snapshot as
JSON); the board's keys act on the selected session (`top/app.py`)."""

from __future__ import annotations

import json
import sys

import click

from betcode.cli.connection import resolve_daemon_address
from betcode.cli.daemon_call import call_daemon, socket_option


@click.command("top")
@socket_option
@click.option("--all", "show_all", is_flag=True, help="Every session, not only the live ones.")
@click.option("--json", "as_json", is_flag=True, help="Print one snapshot as JSON and exit.")
@click.option(
    "--interval", default=2.0, show_default=True, type=click.FloatRange(0.2), help="Seconds "
    "between refreshes.",
)  # fmt: skip
def top(socket_path: str | None, show_all: bool, as_json: bool, interval: float) -> None:
    """The task board: the live sessions (working, waited on, attached to, or with claude
    running; --all: every one) with their name, worktree and branch or directory, state,
    approvals waiting, clients, tokens, cost and cost per hour over the last 10 minutes; a
    subagent's session under its parent.

    \b
    Keys: enter opens the chat, y allows and n denies the oldest waiting request,
    c cancels the turn, x twice deletes, / filters, a toggles all/live, q quits."""
    from betcode.cli.top.rows import live_rows, totals
    from betcode.cli.top.source import DaemonBoard, board_rows

    if as_json:
        rows = call_daemon(socket_path, board_rows)
        shown = rows if show_all else live_rows(rows)
        click.echo(
            json.dumps(
                {"summary": totals(rows), "sessions": [row.as_json() for row in shown]}, indent=2
            )
        )
        return
    from betcode.cli.top.app import TopApp

    board = DaemonBoard(resolve_daemon_address(socket_path))
    chosen = TopApp(board, interval, show_all=show_all).run()
    if chosen:
        from betcode.cli.chat import ChatOptions, run_chat

        sys.exit(run_chat(ChatOptions(socket=socket_path, session_id=chosen)))
