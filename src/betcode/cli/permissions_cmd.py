"""`betcode permissions pending | allow ID | deny ID | answer ID ANSWER...`: answer permission
requests and questions from any terminal.

Requests wait in the daemon (for days if need be), so they can be answered from a terminal
other than the one running the session, through AgentService.ListPendingPermissions and
AnswerPermission. A question (AskUserQuestion) is answered with `answer`, one answer per
question; `allow` refuses it, since allowing a question without answers tells claude nothing.
Exit codes (docs/CLI.md#exit-codes): 0 done (also when the request had already been answered), 2 the
daemon is not reachable, 5 unusable arguments, 6 no such request, others as the daemon says.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import click
from google.protobuf import json_format

from betcode.cli.connection import DaemonClient, DaemonUnavailable
from betcode.cli.daemon_call import call_daemon, socket_option
from betcode.cli.exit_codes import ExitCode
from betcode.cli.ids import REQUESTS, NotFound
from betcode.cli.session_places import Place, session_places
from betcode.config.values import format_duration
from betcode.permissions.cost_requests import COST_LIMIT_TOOL
from betcode.v1 import agent_pb2, common_pb2

Decision = common_pb2.PermissionDecision
MAX_INPUT_SHOWN = 100


@click.group("permissions")
def permissions_group() -> None:
    """List and answer the permission requests waiting in the daemon."""


@permissions_group.command("pending")
@click.option("--json", "as_json", is_flag=True, help="A JSON list instead of text.")
@socket_option
def pending(as_json: bool, socket_path: str | None) -> None:
    """Every request waiting for an answer, oldest first, with the session that asks: its name,
    and its worktree and branch or its directory."""

    async def gather(
        client: DaemonClient,
    ) -> tuple[list[agent_pb2.PendingPermission], Mapping[str, Place]]:
        return await client.list_pending_permissions(), await session_places(client)

    rows, places = call_daemon(socket_path, gather)
    if as_json:
        click.echo(
            json.dumps([_as_json(row, places.get(row.session_id)) for row in rows], indent=2)
        )
        return
    if not rows:
        click.echo("No permission requests are waiting.")
        return
    now = time.time()
    for row in rows:
        waited = format_duration(max(0, int(now - row.received_at.seconds)))
        expires = format_duration(max(0, int(row.expires_at.seconds - now)))
        kind = "question" if row.is_question else row.tool_name
        place = places.get(row.session_id)
        asker = place.describe() if place else f"session {row.session_id}"
        click.echo(f"{row.request_id}  {kind}  {asker}")
        click.echo(f"    {_what(row)}")
        click.echo(f"    waiting {waited}, denied automatically in {expires}")
        if row.is_question:
            click.echo(f"    options and answers: betcode permissions answer {row.request_id}")


@permissions_group.command("allow")
@click.argument("request_id", shell_complete=REQUESTS.complete)
@click.option(
    "--session-wide", is_flag=True, help="Also allow such calls for the rest of the session."
)
@socket_option
def allow(request_id: str, session_wide: bool, socket_path: str | None) -> None:
    """Allow the request REQUEST_ID (its id, a unique start of it, or its session's name)."""
    request_id, row = _pending_row(socket_path, request_id)
    if row is not None and row.is_question:
        _fail(
            f"{request_id} is a question, not a tool request: allowing it would send claude no "
            f"answers. Answer it with `betcode permissions answer {request_id} ANSWER...` "
            "(one answer per question; without answers it shows the options), or in "
            "`betcode chat`.",
            ExitCode.INVALID_ARGUMENTS,
        )
    decision = (
        Decision.PERMISSION_DECISION_ALLOW_SESSION
        if session_wide
        else Decision.PERMISSION_DECISION_ALLOW_ONCE
    )
    _answer(
        socket_path, agent_pb2.AnswerPermissionRequest(request_id=request_id, decision=decision)
    )


@permissions_group.command("deny")
@click.argument("request_id", shell_complete=REQUESTS.complete)
@click.option("--message", default="", help="What claude is told (default: a generic denial).")
@socket_option
def deny(request_id: str, message: str, socket_path: str | None) -> None:
    """Deny the request REQUEST_ID (its id, a unique start of it, or its session's name)."""
    request_id, _row = _pending_row(socket_path, request_id)
    request = agent_pb2.AnswerPermissionRequest(
        request_id=request_id, decision=Decision.PERMISSION_DECISION_DENY, message=message
    )
    _answer(socket_path, request)


@permissions_group.command("answer")
@click.argument("request_id", shell_complete=REQUESTS.complete)
@click.argument("answers", nargs=-1)
@socket_option
def answer(request_id: str, answers: tuple[str, ...], socket_path: str | None) -> None:
    """Answer the question REQUEST_ID: one ANSWER per question, in order.

    An answer is an option's number or label, or any other text. For a multi-select question,
    separate several choices with commas ("1,3"). Without ANSWERs, shows the questions and their
    options and sends nothing.
    """
    request_id, row = _pending_row(socket_path, request_id)
    if row is None:
        _fail(
            f"no question {request_id} is waiting (answered already, or expired); "
            "`betcode permissions pending` lists the waiting ones",
            ExitCode.SESSION_NOT_FOUND,
        )
    if not row.is_question:
        _fail(
            f"{request_id} is a {row.tool_name} request, not a question: use "
            f"`betcode permissions allow {request_id}` or `... deny {request_id}`",
            ExitCode.INVALID_ARGUMENTS,
        )
    if not answers:
        click.echo(describe_questions(row.questions))
        click.echo(
            f"\nNothing was sent. Answer with: betcode permissions answer {request_id} "
            + " ".join(f"ANSWER{n}" for n in range(1, len(row.questions) + 1))
        )
        return
    if len(answers) != len(row.questions):
        _fail(
            f"{request_id} asks {len(row.questions)} question(s) but {len(answers)} answer(s) "
            f"were given:\n{describe_questions(row.questions)}",
            ExitCode.INVALID_ARGUMENTS,
        )
    chosen = {
        prompt.question: resolve_answer(prompt, given)
        for prompt, given in zip(row.questions, answers, strict=True)
    }
    request = agent_pb2.AnswerPermissionRequest(
        session_id=row.session_id, request_id=request_id, answers=chosen
    )
    _answer(socket_path, request)
    for question, chosen_answer in chosen.items():
        click.echo(f"    {question} → {chosen_answer}")


def resolve_answer(prompt: agent_pb2.QuestionPrompt, given: str) -> str:
    """The answer text claude receives: option numbers become labels, labels are matched
    without regard to case, other text is kept as the user's own answer. Several choices of a
    multi-select question are joined with ", " (as the chat does)."""
    parts = given.split(",") if prompt.multi_select else [given]
    labels = [option.label for option in prompt.options]
    chosen: list[str] = []
    for part in (p.strip() for p in parts):
        if part.isdigit() and 1 <= int(part) <= len(labels):
            chosen.append(labels[int(part) - 1])
        else:
            chosen.append(next((lb for lb in labels if lb.casefold() == part.casefold()), part))
    return ", ".join(c for c in chosen if c)


def describe_questions(questions: Sequence[agent_pb2.QuestionPrompt]) -> str:
    lines: list[str] = []
    for number, prompt in enumerate(questions, start=1):
        several = " (several choices: separate them with commas)" if prompt.multi_select else ""
        lines.append(f"{number}. {prompt.question}{several}")
        for index, option in enumerate(prompt.options, start=1):
            detail = f" — {option.description}" if option.description else ""
            lines.append(f"     {index}) {option.label}{detail}")
    return "\n".join(lines)


def _pending_row(
    socket_path: str | None, reference: str
) -> tuple[str, agent_pb2.PendingPermission | None]:
    """The full id `reference` names (`ids`) and its waiting row, if it is waiting."""

    async def find(client: DaemonClient) -> tuple[str, agent_pb2.PendingPermission | None]:
        try:
            row = (await REQUESTS.find(client, reference)).row
        except DaemonUnavailable:
            if client.address.relay is None:
                raise
            # The machine is offline: the answer is sent as given, for the relay to keep
            # until it reconnects (a read cannot wait there).
            return reference, None
        except NotFound:
            # Sent as given: the daemon still knows an answered request (and says it was
            # answered already) and refuses an unknown one with NOT_FOUND (exit 6).
            return reference, None
        return row.request_id, row

    return call_daemon(socket_path, find)


def _fail(message: str, code: ExitCode) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _answer(socket_path: str | None, request: agent_pb2.AnswerPermissionRequest) -> None:
    response = call_daemon(socket_path, lambda client: client.answer_permission(request))
    if response.duplicate:
        click.echo(f"{request.request_id} was already answered: {response.outcome}")
    else:
        click.echo(f"{request.request_id}: {response.outcome}")


def _what(row: agent_pb2.PendingPermission) -> str:
    if row.is_question:
        return " / ".join(question.question for question in row.questions)
    tool_input = json_format.MessageToDict(row.input)
    if row.tool_name == COST_LIMIT_TOOL:  # its input is the held message and the numbers
        shown = f"the message held: {tool_input.get('message', '')}"
    else:
        shown = str(
            tool_input.get("command") or tool_input.get("file_path") or json.dumps(tool_input)
        )
    if len(shown) > MAX_INPUT_SHOWN:
        shown = shown[: MAX_INPUT_SHOWN - 1] + "…"
    return f"{row.description}: {shown}" if row.description else shown


def _as_json(row: agent_pb2.PendingPermission, place: Place | None) -> dict[str, Any]:
    return {
        "request_id": row.request_id,
        "session_id": row.session_id,
        "session_name": place.name if place else "",
        "worktree": place.worktree if place else "",
        "branch": place.branch if place else "",
        "tool_name": row.tool_name,
        "description": row.description,
        "input": json_format.MessageToDict(row.input),
        "received_at": row.received_at.seconds,
        "expires_at": row.expires_at.seconds,
        "is_question": row.is_question,
        "questions": [question.question for question in row.questions],
    }
