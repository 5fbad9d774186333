"""`betcode subagent spawn|list|watch|send|cancel|revoke` (plans of them: `plan_cmd`).

A subagent's questions wait in its parent session's inbox: `betcode permissions pending`
lists them ("subagent NAME asks ..."), and any client of the parent can answer them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import click
import grpc

from betcode.cli.connection import DaemonClient, daemon_error
from betcode.cli.daemon_call import call_daemon, socket_option
from betcode.cli.ids import SESSIONS, SUBAGENTS, session_id_of, subagent_id_of
from betcode.v1 import subagent_pb2, subagent_pb2_grpc

EXIT_STEP_FAILED = 1
STATUS_NAMES = {
    subagent_pb2.SUBAGENT_STATUS_PENDING: "pending",
    subagent_pb2.SUBAGENT_STATUS_RUNNING: "running",
    subagent_pb2.SUBAGENT_STATUS_COMPLETED: "completed",
    subagent_pb2.SUBAGENT_STATUS_FAILED: "failed",
    subagent_pb2.SUBAGENT_STATUS_CANCELLED: "cancelled",
}
json_option = click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")


def subagents(client: DaemonClient) -> subagent_pb2_grpc.SubagentServiceStub:
    return client.service_stub(subagent_pb2_grpc.SubagentServiceStub)


async def streamed(client: DaemonClient, call: Any) -> AsyncIterator[Any]:
    """A server stream's messages; a failed call becomes the CLI's DaemonError."""
    try:
        async for message in call:
            yield message
    except grpc.aio.AioRpcError as error:
        raise daemon_error(error, client.address) from None


@click.group("subagent")
def subagent_group() -> None:
    """Claude sessions a parent session starts, each with its own process and history."""


@subagent_group.command("spawn")
@click.argument("prompt")
@click.option(
    "--parent",
    "parent_session_id",
    required=True,
    shell_complete=SESSIONS.complete,
    help="The parent session (id, unique prefix or name).",
)
@click.option("--model", default="", help="Model for this subagent (e.g. a cheaper one).")
@click.option(
    "--cwd", "working_directory", default="", help="Working directory (default: the parent's)."
)
@click.option("--tool", "tools", multiple=True, help="A tool it may use (repeat); default: all.")
@click.option("--max-turns", type=click.IntRange(0, 200), default=0, help="Model calls per turn.")
@click.option("--name", default="", help="Its name, shown with its questions.")
@click.option("--auto-approve", is_flag=True, help="Approve calls of --tool tools within limits.")
@click.option("--inherit-grants", is_flag=True, help="Start with the parent's session grants.")
@click.option("--env", "env_pairs", multiple=True, help="KEY=VALUE for its claude (repeat).")
@json_option
@socket_option
def spawn(
    prompt: str,
    parent_session_id: str,
    model: str,
    working_directory: str,
    tools: tuple[str, ...],
    max_turns: int,
    name: str,
    auto_approve: bool,
    inherit_grants: bool,
    env_pairs: tuple[str, ...],
    as_json: bool,
    socket_path: str | None,
) -> None:
    """Start a subagent of PARENT running PROMPT; prints its id and session id."""
    env = {}
    for pair in env_pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--env")
        env[key] = value
    request = subagent_pb2.SpawnSubagentRequest(
        prompt=prompt,
        model=model,
        working_directory=os.path.abspath(working_directory) if working_directory else "",
        allowed_tools=tools,
        max_turns=max_turns,
        env=env,
        name=name,
        auto_approve=auto_approve,
        inherit_grants=inherit_grants,
    )

    async def act(client: DaemonClient) -> subagent_pb2.SpawnSubagentResponse:
        request.parent_session_id = await session_id_of(client, parent_session_id)
        return await client.call(subagents(client).SpawnSubagent, request)

    response = call_daemon(socket_path, act)
    if as_json:
        click.echo(
            json.dumps({"subagent_id": response.subagent_id, "session_id": response.session_id})
        )
    else:
        click.echo(f"{response.subagent_id}  session {response.session_id}")


@subagent_group.command("list")
@click.option(
    "--parent",
    "parent_session_id",
    default="",
    shell_complete=SESSIONS.complete,
    help="Only this session's subagents (id, unique prefix or name).",
)
@click.option("--status", type=click.Choice(sorted(STATUS_NAMES.values())), help="Only these.")
@json_option
@socket_option
def list_subagents(
    parent_session_id: str, status: str | None, as_json: bool, socket_path: str | None
) -> None:
    """Subagents, oldest first."""

    async def act(client: DaemonClient) -> subagent_pb2.ListSubagentsResponse:
        request = subagent_pb2.ListSubagentsRequest(
            parent_session_id=await session_id_of(client, parent_session_id),
            status_filter=status or "",
        )
        return await client.call(subagents(client).ListSubagents, request)

    response = call_daemon(socket_path, act)
    if as_json:
        click.echo(json.dumps([_info(s) for s in response.subagents], indent=2))
        return
    if not response.subagents:
        click.echo("No subagents.")
    for info in response.subagents:
        step = f"  step {info.step_id}" if info.step_id else ""
        click.echo(f"{info.id}  {STATUS_NAMES.get(info.status, '?'):9}  {info.name}{step}")
        if info.result_summary:
            click.echo(f"    {info.result_summary.splitlines()[0][:120]}")


def _info(info: subagent_pb2.SubagentInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "parent_session_id": info.parent_session_id,
        "session_id": info.session_id,
        "name": info.name,
        "status": STATUS_NAMES.get(info.status, "unknown"),
        "orchestration_id": info.orchestration_id,
        "step_id": info.step_id,
        "result_summary": info.result_summary,
    }


@subagent_group.command("watch")
@click.argument("subagent_id", shell_complete=SUBAGENTS.complete)
@click.option(
    "--from", "from_sequence", type=click.IntRange(0), default=0, help="Resume after this sequence."
)
@socket_option
def watch(subagent_id: str, from_sequence: int, socket_path: str | None) -> None:
    """Follow a subagent's output until it ends; exit 0 if it completed, 1 otherwise."""

    async def follow(client: DaemonClient) -> str:
        request = subagent_pb2.WatchSubagentRequest(
            subagent_id=await subagent_id_of(client, subagent_id), from_sequence=from_sequence
        )
        end = "running"
        async for event in streamed(client, subagents(client).WatchSubagent(request)):
            end = _show(event) or end
        return end

    end = call_daemon(socket_path, follow)
    sys.exit(0 if end == "completed" else EXIT_STEP_FAILED)


def _show(event: subagent_pb2.SubagentEvent) -> str | None:
    kind = event.WhichOneof("event")
    if kind == "output":
        click.echo(event.output.text, nl=event.output.is_complete)
    elif kind == "tool_use":
        click.echo(f"[tool {event.tool_use.tool_name}]")
    elif kind == "permission_request":
        asked = event.permission_request
        click.echo(
            f"[{asked.tool_name} waits for approval: betcode permissions allow {asked.request_id}]"
        )
    elif kind == "completed":
        click.echo(f"[completed] {event.completed.result_summary}")
        return "completed"
    elif kind == "failed":
        click.echo(f"[failed] {event.failed.error_message}", err=True)
        return "failed"
    elif kind == "cancelled":
        click.echo(f"[cancelled] {event.cancelled.reason}", err=True)
        return "cancelled"
    return None


@subagent_group.command("send")
@click.argument("subagent_id", shell_complete=SUBAGENTS.complete)
@click.argument("text")
@socket_option
def send(subagent_id: str, text: str, socket_path: str | None) -> None:
    """Send TEXT to a running subagent (exit 1 if it is not running)."""

    async def act(client: DaemonClient) -> subagent_pb2.SendToSubagentResponse:
        request = subagent_pb2.SendToSubagentRequest(
            subagent_id=await subagent_id_of(client, subagent_id), content=text
        )
        return await client.call(subagents(client).SendToSubagent, request)

    response = call_daemon(socket_path, act)
    if not response.delivered:
        click.echo(f"{subagent_id} is not running; nothing was sent", err=True)
        sys.exit(EXIT_STEP_FAILED)


@subagent_group.command("cancel")
@click.argument("subagent_id", shell_complete=SUBAGENTS.complete)
@click.option("--reason", default="", help="Why (audited).")
@click.option(
    "--force", is_flag=True, help="SIGKILL at once instead of SIGTERM and a grace period."
)
@click.option(
    "--cleanup-worktree",
    is_flag=True,
    help="Also remove the worktree the daemon made for it (kept if that would lose work).",
)
@socket_option
def cancel(
    subagent_id: str, reason: str, force: bool, cleanup_worktree: bool, socket_path: str | None
) -> None:
    """Stop a subagent; prints the calls it ran and how many were auto-approved."""

    async def act(client: DaemonClient) -> subagent_pb2.CancelSubagentResponse:
        request = subagent_pb2.CancelSubagentRequest(
            subagent_id=await subagent_id_of(client, subagent_id),
            reason=reason,
            force=force,
            cleanup_worktree=cleanup_worktree,
        )
        return await client.call(subagents(client).CancelSubagent, request)

    response = call_daemon(socket_path, act)
    if not response.cancelled:
        click.echo(f"{subagent_id} had already ended: {response.final_status}")
        return
    click.echo(
        f"{subagent_id} cancelled after {response.tool_calls_executed} tool calls "
        f"({response.tool_calls_auto_approved} auto-approved)"
    )
    if cleanup_worktree:
        click.echo(worktree_cleanup_outcome(response))


def worktree_cleanup_outcome(response: subagent_pb2.CancelSubagentResponse) -> str:
    if response.worktree_removed:
        return "worktree removed"
    # The daemon says why (work at risk, or no worktree made for this subagent).
    return f"worktree not removed: {response.worktree_kept_reason or 'no reason given'}"


@subagent_group.command("revoke")
@click.argument("subagent_id", shell_complete=SUBAGENTS.complete)
@click.option("--reason", required=True, help="Why (at least 10 characters; audited).")
@click.option("--terminate-if-pending", is_flag=True, help="End it if a call is running.")
@socket_option
def revoke(
    subagent_id: str, reason: str, terminate_if_pending: bool, socket_path: str | None
) -> None:
    """Turn a subagent's auto-approve off; its next calls ask the parent's inbox."""

    async def act(client: DaemonClient) -> subagent_pb2.RevokeAutoApproveResponse:
        request = subagent_pb2.RevokeAutoApproveRequest(
            subagent_id=await subagent_id_of(client, subagent_id),
            reason=reason,
            terminate_if_pending=terminate_if_pending,
        )
        return await client.call(subagents(client).RevokeAutoApprove, request)

    response = call_daemon(socket_path, act)
    if not response.revoked:
        click.echo(f"nothing to revoke: {subagent_id} is {response.subagent_status}")
        return
    click.echo(
        f"auto-approve revoked ({response.pending_tool_calls} call(s) still running); "
        f"{subagent_id} is {response.subagent_status}"
    )
