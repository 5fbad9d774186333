"""`betcode run PROMPT`: one headless turn through the daemon.

Without ``--yes`` it never answers a permission request on the user's behalf: the request stays
pending in the daemon (answer it with `betcode permissions allow ID` from any terminal) and the
run waits for it, until ``--timeout``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import click
import grpc
from google.protobuf import json_format

from betcode.cli.connection import (
    DaemonClient,
    DaemonError,
    DaemonUnavailable,
    resolve_daemon_address,
)
from betcode.v1 import agent_pb2, common_pb2

# DIGEST §11.4
EXIT_OK = 0
EXIT_AGENT_ERROR = 1
EXIT_CONNECTION = 2
EXIT_PERMISSION_DENIED = 3
EXIT_RATE_LIMITED = 4
EXIT_INVALID_ARGS = 5
EXIT_SESSION_NOT_FOUND = 6
EXIT_INTERNAL = 7

LIVE_ONLY = 2**63 - 1  # from_sequence past any stored event: no history, just what comes next


@dataclass
class RunResult:
    session_id: str = ""
    text: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    denials: list[str] = field(default_factory=list)
    error: str = ""
    stop_reason: str = ""


@click.command("run")
@click.argument("prompt")
@click.option("--session", "session_id", help="Continue this session.")
@click.option("--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory.")
@click.option("--model", default="", help="Model for a new session.")
@click.option("--yes", is_flag=True, help="Approve every permission request.")
@click.option("--output", type=click.Choice(["text", "json", "stream-json"]), default="text")
@click.option("--timeout", type=float, default=0.0, help="Give up after this many seconds.")
@click.option("--socket", "socket_path", help="Daemon socket.")
def run(
    prompt: str,
    session_id: str | None,
    cwd: str | None,
    model: str,
    yes: bool,
    output: str,
    timeout: float,
    socket_path: str | None,
) -> None:
    """Send PROMPT (or - for stdin) and stream the answer."""
    text = sys.stdin.read() if prompt == "-" else prompt
    if not text.strip():
        click.echo("error: the prompt is empty", err=True)
        sys.exit(EXIT_INVALID_ARGS)
    work_dir = os.path.abspath(cwd or os.getcwd())
    runner = _run(text, session_id, work_dir, model, yes, output, socket_path)
    try:
        result = asyncio.run(asyncio.wait_for(runner, timeout) if timeout > 0 else runner)
    except TimeoutError:
        click.echo(f"error: no answer within {timeout:g}s", err=True)
        sys.exit(EXIT_AGENT_ERROR)
    except DaemonUnavailable as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(EXIT_CONNECTION)
    except DaemonError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(EXIT_SESSION_NOT_FOUND if "not found" in str(error).lower() else EXIT_INTERNAL)
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "session_id": result.session_id,
                    "text": "".join(result.text),
                    "usage": result.usage,
                    "denials": result.denials,
                    "stop_reason": result.stop_reason,
                    "error": result.error or None,
                }
            )
        )
    elif output == "text":
        click.echo("")
    sys.exit(EXIT_AGENT_ERROR if result.error else EXIT_OK)


async def _run(
    prompt: str,
    session_id: str | None,
    cwd: str,
    model: str,
    yes: bool,
    output: str,
    socket_path: str | None,
) -> RunResult:
    client = await DaemonClient.connect(resolve_daemon_address(socket_path))
    result = RunResult(session_id=session_id or "")
    outbox: asyncio.Queue[agent_pb2.AgentRequest] = asyncio.Queue()
    start = agent_pb2.StartConversation(
        session_id=session_id or "", working_directory=cwd, model=model, client_type="headless"
    )
    if session_id:
        start.from_sequence = LIVE_ONLY
    await outbox.put(agent_pb2.AgentRequest(start=start))
    await outbox.put(agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content=prompt)))

    async def requests() -> Any:
        while True:
            yield await outbox.get()

    try:
        call = client._stub.Converse(requests(), metadata=client._metadata)
        async for event in call:
            if _handle(event, result, yes, output, outbox):
                break
        call.cancel()
    except grpc.aio.AioRpcError as error:
        raise DaemonError(error.details() or str(error.code())) from None
    finally:
        await client.close()
    return result


def _handle(
    event: agent_pb2.AgentEvent,
    result: RunResult,
    yes: bool,
    output: str,
    outbox: asyncio.Queue[agent_pb2.AgentRequest],
) -> bool:
    """Processes one event; True when the turn is over."""
    kind = event.WhichOneof("event")
    if output == "stream-json":
        click.echo(json_format.MessageToJson(event, indent=None))
    if kind == "session_info" and not result.session_id:
        result.session_id = event.session_info.session_id
    elif kind == "text_delta":
        result.text.append(event.text_delta.text)
        if output == "text":
            click.echo(event.text_delta.text, nl=False)
    elif kind == "permission_request":
        request = event.permission_request
        if yes:
            outbox.put_nowait(
                agent_pb2.AgentRequest(
                    permission=agent_pb2.PermissionResponse(
                        request_id=request.request_id,
                        decision=common_pb2.PermissionDecision.PERMISSION_DECISION_ALLOW_ONCE,
                    )
                )
            )
        elif not request.is_replay:
            click.echo(
                f"\n[waiting for approval of {request.tool_name}: "
                f"`betcode permissions allow {request.request_id}` or "
                f"`betcode permissions deny {request.request_id}` from any terminal]",
                err=True,
            )
    elif kind == "user_question" and not event.user_question.is_replay:
        click.echo(
            f"\n[a question is waiting: `betcode permissions pending` shows it "
            f"(id {event.user_question.question_id})]",
            err=True,
        )
    elif kind == "permission_resolved" and event.permission_resolved.outcome == "denied":
        result.denials.append(event.permission_resolved.request_id)
    elif kind == "usage":
        result.usage = json_format.MessageToDict(event.usage)
    elif kind == "error" and event.error.code not in ("API_RETRY",):
        result.error = event.error.message
        if event.error.is_fatal:
            return True
    elif kind == "turn_complete":
        result.stop_reason = event.turn_complete.stop_reason
        return True
    return False
