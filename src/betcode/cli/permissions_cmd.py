"""`betcode permissions pending | allow ID | deny ID`: answer permission requests from any terminal.

Requests wait in the daemon (for days if need be), so they can be answered from a terminal
other than the one running the session, through AgentService.ListPendingPermissions and
AnswerPermission. Exit codes (DIGEST §11.4): 0 done (also when the request had already been
answered), 2 the daemon is not reachable, 6 no such request, others as the daemon says.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from google.protobuf import json_format

from betcode.cli.connection import DaemonClient, DaemonError, resolve_daemon_address
from betcode.config.values import format_duration
from betcode.v1 import agent_pb2, common_pb2

Decision = common_pb2.PermissionDecision
MAX_INPUT_SHOWN = 100
T = TypeVar("T")

socket_option = click.option(
    "--socket",
    "socket_path",
    help="The daemon's socket (default: $BETCODE_SOCKET, then the usual place).",
)


@click.group("permissions")
def permissions_group() -> None:
    """List and answer the permission requests waiting in the daemon."""


@permissions_group.command("pending")
@click.option("--json", "as_json", is_flag=True, help="A JSON list instead of text.")
@socket_option
def pending(as_json: bool, socket_path: str | None) -> None:
    """Every request waiting for an answer, oldest first."""
    rows = _call(socket_path, lambda client: client.list_pending_permissions())
    if as_json:
        click.echo(json.dumps([_as_json(row) for row in rows], indent=2))
        return
    if not rows:
        click.echo("No permission requests are waiting.")
        return
    now = time.time()
    for row in rows:
        waited = format_duration(max(0, int(now - row.received_at.seconds)))
        expires = format_duration(max(0, int(row.expires_at.seconds - now)))
        kind = "question" if row.is_question else row.tool_name
        click.echo(f"{row.request_id}  {kind}  session {row.session_id}")
        click.echo(f"    {_what(row)}")
        click.echo(f"    waiting {waited}, denied automatically in {expires}")


@permissions_group.command("allow")
@click.argument("request_id")
@click.option(
    "--session-wide", is_flag=True, help="Also allow such calls for the rest of the session."
)
@socket_option
def allow(request_id: str, session_wide: bool, socket_path: str | None) -> None:
    """Allow the request REQUEST_ID."""
    decision = (
        Decision.PERMISSION_DECISION_ALLOW_SESSION
        if session_wide
        else Decision.PERMISSION_DECISION_ALLOW_ONCE
    )
    _answer(
        socket_path, agent_pb2.AnswerPermissionRequest(request_id=request_id, decision=decision)
    )


@permissions_group.command("deny")
@click.argument("request_id")
@click.option("--message", default="", help="What claude is told (default: a generic denial).")
@socket_option
def deny(request_id: str, message: str, socket_path: str | None) -> None:
    """Deny the request REQUEST_ID."""
    request = agent_pb2.AnswerPermissionRequest(
        request_id=request_id, decision=Decision.PERMISSION_DECISION_DENY, message=message
    )
    _answer(socket_path, request)


def _answer(socket_path: str | None, request: agent_pb2.AnswerPermissionRequest) -> None:
    response = _call(socket_path, lambda client: client.answer_permission(request))
    if response.duplicate:
        click.echo(f"{request.request_id} was already answered: {response.outcome}")
    else:
        click.echo(f"{request.request_id}: {response.outcome}")


def _call(socket_path: str | None, action: Callable[[DaemonClient], Awaitable[T]]) -> T:
    """Run one call on a fresh connection; a failure exits with its code and a clear line."""

    async def run() -> T:
        async with await DaemonClient.connect(resolve_daemon_address(socket_path)) as client:
            return await action(client)

    try:
        return asyncio.run(run())
    except DaemonError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(error.exit_code)


def _what(row: agent_pb2.PendingPermission) -> str:
    if row.is_question:
        return " / ".join(question.question for question in row.questions)
    tool_input = json_format.MessageToDict(row.input)
    shown = str(tool_input.get("command") or tool_input.get("file_path") or json.dumps(tool_input))
    if len(shown) > MAX_INPUT_SHOWN:
        shown = shown[: MAX_INPUT_SHOWN - 1] + "…"
    return f"{row.description}: {shown}" if row.description else shown


def _as_json(row: agent_pb2.PendingPermission) -> dict[str, Any]:
    return {
        "request_id": row.request_id,
        "session_id": row.session_id,
        "tool_name": row.tool_name,
        "description": row.description,
        "input": json_format.MessageToDict(row.input),
        "received_at": row.received_at.seconds,
        "expires_at": row.expires_at.seconds,
        "is_question": row.is_question,
        "questions": [question.question for question in row.questions],
    }
