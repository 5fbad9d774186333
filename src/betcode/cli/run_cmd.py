"""`betcode run PROMPT`: one headless turn through the daemon, streamed to stdout.

Without `--yes` or a matching `--allow` rule it never answers a permission request on the
user's behalf: the request stays pending in the daemon, the run says on stderr how to answer it
from any terminal (`betcode permissions allow ID`) and waits, until it is answered or
`--timeout` passes. A run continuing a session (`--session`, `--continue`) that still waits
for an answer to an earlier request waits for it the same way: the new message cannot be
taken before. Whatever happens to the run, the session and its requests live on in the
daemon. Exit codes: docs/CLI.md#exit-codes (`exit_codes`); `headless` decides which.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import click

from betcode.cli.connection import (
    DaemonClient,
    DaemonError,
    DaemonUnavailable,
    RequestQueued,
    SessionNotFound,
    other_client_label,
    resolve_daemon_address,
)
from betcode.cli.conversation import CLIENT_TYPE, ConnectionChange, ConversationStream
from betcode.cli.exit_codes import ExitCode
from betcode.cli.headless import (
    OUTPUTS,
    Approver,
    Streams,
    TurnFollower,
    parse_allow_rules,
)
from betcode.cli.ids import SESSIONS, find_session
from betcode.cli.relay_login import machine_directory, relay_choice
from betcode.cli.worktree_target import open_worktree
from betcode.permissions.rules import InvalidRule
from betcode.v1 import common_pb2
from betcode.v1.agent_pb2 import AgentEvent, ErrorEvent, SessionSummary

ALLOW_ONCE = common_pb2.PermissionDecision.PERMISSION_DECISION_ALLOW_ONCE
NO_INPUT_LOCK = "NO_INPUT_LOCK"
RECONNECT_GIVE_UP_SECONDS = 30.0  # a headless run is not left retrying a vanished daemon forever


@dataclass(frozen=True)
class Target:
    """Where the turn runs: the daemon, the session (by id prefix, or the latest in `cwd`)."""

    socket: str | None
    cwd: str
    session: str | None
    continue_last: bool
    model: str
    worktree: str = ""  # --worktree: run in this worktree (made if missing)


EXIT_CODES_HELP = """\b
Exit codes:
  0  done
  1  claude failed the turn, it was cancelled, or it did not finish within
     --timeout
  2  the daemon cannot be reached, or it stopped claude during the turn
  3  a permission request was denied or expired, or not answered within
     --timeout
  4  rate limited (stderr says when to retry)
  5  invalid arguments
  6  no such session
  7  internal error (claude crashed, or a daemon failure)
"""


@click.command("run", epilog=EXIT_CODES_HELP)
@click.argument("prompt")
@click.option(
    "--session",
    "session_ref",
    shell_complete=SESSIONS.complete,
    help="Continue this session (id, unique prefix or name).",
)
@click.option("--continue", "continue_last", is_flag=True, help="Continue the latest session here.")
@click.option(
    "--cwd",
    callback=machine_directory,
    help="Working directory (through a relay: an absolute path on the machine).",
)
@click.option(
    "--worktree",
    default="",
    help="Run in this git worktree (created in the repository here if it does not exist).",
)
@click.option("--model", default="", help="Model for a new session.")
@click.option("--yes", is_flag=True, help="Approve every permission request.")
@click.option(
    "--allow",
    "allow_rules",
    multiple=True,
    metavar="RULE",
    help="Approve requests this Claude Code rule allows, e.g. 'Bash(git status)' (repeatable).",
)
@click.option(
    "--output",
    type=click.Choice(OUTPUTS),
    default="text",
    show_default=True,
    help="text: the answer as it streams; json: one object at the end (text, session_id, "
    'usage, cost_usd, denials, ...); stream-json: one event per line, then {"result": ...}.',
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=0.0,
    help="Give up after this many seconds (0: wait as long as it takes).",
)
@click.option("--socket", "socket_path", help="Daemon socket.")
def run(
    prompt: str,
    session_ref: str | None,
    continue_last: bool,
    cwd: str | None,
    worktree: str,
    model: str,
    yes: bool,
    allow_rules: tuple[str, ...],
    output: str,
    timeout: float,
    socket_path: str | None,
) -> None:
    """Send PROMPT (or - to read it from stdin) and stream the answer."""
    if session_ref and continue_last:
        raise click.UsageError("--session and --continue cannot be used together")
    text = sys.stdin.read() if prompt == "-" else prompt
    if not text.strip():
        raise click.BadParameter("the prompt is empty", param_hint="PROMPT")
    try:
        rules = parse_allow_rules(allow_rules)
    except InvalidRule as error:
        raise click.BadParameter(f"{error.text!r}: {error.reason}", param_hint="--allow") from None
    # Through a relay the path is the machine's: it is not resolved against this one's files.
    remote = relay_choice(need_machine=False) is not None
    work_dir = cwd if remote and cwd else os.path.realpath(cwd or os.getcwd())
    hint = f" --socket {shlex.quote(socket_path)}" if socket_path else ""
    streams = Streams(sys.stdout, sys.stderr, output, hint)
    approver = Approver(yes, rules, work_dir, str(Path.home()))
    follower = TurnFollower(text, approver, streams)
    target = Target(socket_path, work_dir, session_ref, continue_last, model, worktree)
    try:
        asyncio.run(_drive(follower, target, timeout))
    except KeyboardInterrupt:
        follower.give_up(ExitCode.AGENT_ERROR, "INTERRUPTED", _goes_on(follower))
    _finish(follower)
    sys.exit(follower.exit_code())


async def _drive(follower: TurnFollower, target: Target, limit_seconds: float) -> None:
    try:
        async with asyncio.timeout(limit_seconds or None):
            await _follow(follower, target)
    except TimeoutError:
        _timed_out(follower, limit_seconds)
    except RequestQueued as queued:
        follower.done = True
        follower.streams.note(str(queued))
    except DaemonError as error:
        code = ExitCode(error.exit_code)
        follower.give_up(code, error.code or code.name, str(error))


async def _follow(follower: TurnFollower, target: Target) -> None:
    async with await DaemonClient.connect(resolve_daemon_address(target.socket)) as client:
        worktree_id = ""
        if target.worktree:
            worktree = await open_worktree(client, target.worktree, target.cwd)
            worktree_id, target = worktree.id, replace(target, cwd=worktree.path)
            follower.approver = replace(follower.approver, cwd=worktree.path)
        try:
            session = await _existing_session(client, target)
        except DaemonUnavailable:
            if client.address.relay is None or not target.session:
                raise
            await _queue_on_relay(client, target.session, follower)
            return
        if session is None and client.address.relay is not None:
            await _require_online(client)
        stream = ConversationStream(
            client, working_directory=target.cwd, model=target.model, worktree_id=worktree_id
        )
        if session is not None:
            stream.session_id = follower.session_id = session.id
            # Path rules of --allow are relative to where the session runs.
            follower.approver = replace(follower.approver, cwd=session.working_directory)
            if target.model and target.model != session.model:
                follower.streams.note(
                    f"--model applies to new sessions; {session.id} keeps its own"
                )
            # A run shows its own turn only; this moves the stream to the live edge.
            async for history in stream.catch_up():
                follower.catch_up(history)
            for request_id in follower.caught_up():
                await stream.answer_permission(request_id, ALLOW_ONCE)
        await stream.send_message(follower.prompt)
        lost_since: float | None = None
        asked_for_lock = False
        async for item in stream.items():
            if isinstance(item, ConnectionChange):
                lost_since = connection_changed(item, lost_since, follower, time.monotonic())
                continue
            if not asked_for_lock and _refused_for_lock(item, follower):
                asked_for_lock = True
                if await _ask_for_lock(client, stream, follower, item.error):
                    continue
            for request_id in follower.on_event(item):
                await stream.answer_permission(request_id, ALLOW_ONCE)
            if follower.done:
                return
        if not follower.done:
            follower.give_up(ExitCode.INTERNAL, "STREAM_ENDED", "the daemon ended the stream")


async def _queue_on_relay(client: DaemonClient, session_id: str, follower: TurnFollower) -> None:
    """The machine is offline: the message is sent as one call the relay keeps until the
    machine reconnects (a read, such as finding the session, cannot wait there), so the
    session is named by its full id. Raises RequestQueued (exit 0) once the relay holds it."""
    try:
        uuid.UUID(session_id)
    except ValueError:
        raise DaemonUnavailable(
            f"machine {client.address.relay.machine_id if client.address.relay else ''} is "
            f"offline: give the session's full id to queue a message for it ({session_id!r} "
            "cannot be looked up while the machine is away)"
        ) from None
    follower.session_id = session_id
    await client.send_recorded(session_id, follower.prompt, CLIENT_TYPE)
    follower.done = True  # the machine came back meanwhile: the message is recorded
    follower.streams.note(f"sent to session {session_id}; the turn goes on in the daemon")


async def _require_online(client: DaemonClient) -> None:
    """A new session starts only on a machine that is online: the relay cannot keep a turn
    whose answer streams back (it would go on reconnecting until --timeout, and the start it
    half-closed would later make an empty session). A read says at once whether it is."""
    try:
        await client.list_sessions(limit=1)
    except DaemonUnavailable:
        machine = client.address.relay.machine_id if client.address.relay else ""
        raise DaemonUnavailable(
            f"machine {machine} is offline: a new session starts only once it is "
            f"back. To queue a message for an existing session until then: `betcode --machine "
            f"{machine} run --session SESSION_ID TEXT` (the session's full id)"
        ) from None


def _refused_for_lock(event: AgentEvent, follower: TurnFollower) -> bool:
    """Our message was refused because another client holds the session's input lock."""
    return (
        not follower.started
        and event.sequence == 0
        and event.WhichOneof("event") == "error"
        and event.error.code == NO_INPUT_LOCK
    )


async def _ask_for_lock(
    client: DaemonClient, stream: ConversationStream, follower: TurnFollower, refusal: ErrorEvent
) -> bool:
    """Asks for the input lock (its holder keeps it by typing in the meantime) and sends the
    message again once granted; False when the holder kept it."""
    holder_id = refusal.details.get("holder_client_id")
    holder = other_client_label(holder_id, client.client_id) if holder_id else "another client"
    follower.streams.note(f"{holder} holds the input lock of this session; asking for it")
    if not (await client.request_input_lock(stream.session_id)).granted:
        follower.streams.note(f"{holder} kept the input lock (they were typing)")
        return False
    follower.streams.note("got the input lock")
    await stream.send_message(follower.prompt)
    return True


async def _existing_session(client: DaemonClient, target: Target) -> SessionSummary | None:
    """The session to continue (--session, --continue), or None for a new one."""
    if target.session:
        return await find_session(client, target.session)
    if not target.continue_last:
        return None
    latest = await client.most_recent_session(target.cwd)
    if latest is None:
        raise SessionNotFound(
            f"no session in {target.cwd} to continue; start one with `betcode run PROMPT`",
            code="SESSION_NOT_FOUND",
        )
    return latest


def connection_changed(
    change: ConnectionChange, lost_since: float | None, follower: TurnFollower, now: float
) -> float | None:
    """When the connection was lost (None: connected); raises DaemonUnavailable once it has
    been lost for RECONNECT_GIVE_UP_SECONDS."""
    if change.connected:
        if lost_since is not None:
            follower.streams.note("reconnected to the daemon")
        return None
    if lost_since is None:
        follower.streams.note(f"lost the daemon ({change.reason}); reconnecting")
        return now
    if now - lost_since > RECONNECT_GIVE_UP_SECONDS:
        raise DaemonUnavailable(
            f"the daemon has not come back for {RECONNECT_GIVE_UP_SECONDS:g} s ({change.reason}); "
            + _goes_on(follower)
        )
    return lost_since


def _timed_out(follower: TurnFollower, timeout: float) -> None:
    if follower.waiting:
        for request_id, what in follower.waiting.items():
            follower.streams.note(
                f"still waiting for an answer to {what}: it stays pending in the daemon; "
                f"`betcode permissions allow {request_id}{follower.streams.socket_hint}` "
                "answers it"
            )
        follower.give_up(
            ExitCode.PERMISSION_DENIED,
            "TIMEOUT",
            f"no answer to {len(follower.waiting)} permission request(s) within {timeout:g} s",
        )
    else:
        follower.give_up(
            ExitCode.AGENT_ERROR,
            "TIMEOUT",
            f"the turn did not finish within {timeout:g} s; {_goes_on(follower)}",
        )


def _goes_on(follower: TurnFollower) -> str:
    if not follower.session_id:
        return "the session goes on in the daemon"
    return (
        f"the session goes on in the daemon: `betcode chat --session {follower.session_id}` "
        "follows it"
    )


def _finish(follower: TurnFollower) -> None:
    streams = follower.streams
    if streams.output == "text":
        if follower.blocks:
            streams.out.write("\n")
    elif streams.output == "json":
        streams.out.write(json.dumps(follower.summary(), indent=2) + "\n")
    else:
        streams.out.write(json.dumps({"result": follower.summary()}) + "\n")
    streams.out.flush()
