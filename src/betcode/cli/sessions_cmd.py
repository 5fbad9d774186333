"""`betcode sessions list | show | export | search | rename | delete | limit | grants`: the
daemon's sessions, and what was said in them (read from the store, without attaching).

A session is named by its id, a unique start of it (as `list` shows it) or its name (`ids`).
Exit codes (docs/CLI.md#exit-codes): 0 done, 2 the daemon is not reachable, 5 an ambiguous id, 6 no
such session.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, TextIO

import click
from google.protobuf import json_format

from betcode.cli.connection import DaemonClient
from betcode.cli.daemon_call import call_daemon, socket_option
from betcode.cli.ids import SESSIONS, IdKind, NotFound, find_session, session_id_of, short_id
from betcode.cli.top.rows import held_state, memory_text
from betcode.cli.transcript import as_json, as_markdown, as_ndjson, stored_events
from betcode.cli.transcript import transcript as conversation
from betcode.daemon_config import EXIT_CONFIG_INVALID
from betcode.v1 import agent_pb2, history_pb2, history_pb2_grpc

SHOWN_OUTPUT_LINES = 20  # of a tool's output in `show --transcript` (export keeps it whole)
EXPORT_FORMATS = ("md", "json", "ndjson")
MAX_PREVIEW = 48

json_option = click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")


@click.group("sessions")
def sessions_group() -> None:
    """List, inspect, rename and delete the daemon's sessions."""


MOVE_HINT = " (gone: `betcode sessions move SESSION DIR` points the session elsewhere)"


@sessions_group.command("list")
@click.option("--cwd", type=click.Path(file_okay=False), help="Only sessions in this directory.")
@click.option("--limit", type=click.IntRange(min=0), default=0, help="At most this many.")
@json_option
@socket_option
def list_sessions(cwd: str | None, limit: int, as_json: bool, socket_path: str | None) -> None:
    """Sessions, most recently active first."""
    where = os.path.realpath(cwd) if cwd else ""
    response = call_daemon(
        socket_path, lambda client: client.list_sessions(working_directory=where, limit=limit)
    )
    if as_json:
        click.echo(json.dumps([summary_json(s) for s in response.sessions], indent=2))
        return
    if not response.sessions:
        click.echo("No sessions." + (f" (none in {where})" if where else ""))
        return
    now = time.time()
    rows = [
        (
            short_id(s.id),
            s.name or "-",
            held_state(s, s.status),
            _ago(s.updated_at.seconds, now),
            str(s.message_count),
            f"${s.total_cost_usd:.4f}",
            s.working_directory + (" (gone)" if s.directory_missing else ""),
            _clip(s.last_message_preview, MAX_PREVIEW),
        )
        for s in response.sessions
    ]
    # message_count counts claude's stored lines (deltas, tool calls, results), not the
    # messages said: one prompt and its answer are dozens.
    header = ("ID", "NAME", "STATUS", "ACTIVE", "EVENTS", "COST", "DIRECTORY", "LAST MESSAGE")
    for line in table(header, rows):
        click.echo(line)
    if response.total > len(response.sessions):
        click.echo(f"({response.total - len(response.sessions)} more; raise --limit)")


@sessions_group.command("show")
@click.argument("session", shell_complete=SESSIONS.complete)
@click.option("--transcript", is_flag=True, help="Also what was said and done (without attaching).")
@json_option
@socket_option
def show(session: str, transcript: bool, as_json: bool, socket_path: str | None) -> None:
    """One session: where it runs, its totals, its waiting requests and grants."""

    async def gather(
        client: DaemonClient,
    ) -> tuple[
        agent_pb2.SessionSummary,
        list[agent_pb2.PendingPermission],
        list[agent_pb2.SessionGrantEntry],
        list[agent_pb2.AgentEvent],
    ]:
        found = await find_session(client, session)
        pending = await client.list_pending_permissions(found.id)
        grants = await client.list_session_grants(found.id)
        events = await stored_events(client, found.id) if transcript else []
        return found, pending, grants, events

    found, pending, grants, events = call_daemon(socket_path, gather)
    if as_json:
        data = summary_json(found)
        data["pending"] = [row.request_id for row in pending]
        data["grants"] = [grant_json(grant) for grant in grants]
        if transcript:
            data["transcript"] = [asdict(entry) for entry in conversation(events)]
        click.echo(json.dumps(data, indent=2))
        return
    now = time.time()
    fields = [
        ("session", found.id),
        ("name", found.name or "-"),
        ("status", held_state(found, found.status)),
        ("model", found.model or "(claude's default)"),
        ("directory", found.working_directory + (MOVE_HINT if found.directory_missing else "")),
        ("created", _ago(found.created_at.seconds, now)),
        ("last active", _ago(found.updated_at.seconds, now)),
        ("events", str(found.message_count)),
        ("tokens", f"{found.total_input_tokens} in, {found.total_output_tokens} out"),
        ("cost", _cost_text(found)),
        ("memory", memory_text(found.claude_rss_bytes / (1024 * 1024), found.over_rss_limit)),
        ("last message", found.last_message_preview or "-"),
        ("waiting", ", ".join(f"{r.request_id} ({r.tool_name})" for r in pending) or "nothing"),
        ("grants", ", ".join(grant_text(g) for g in grants) or "none"),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        click.echo(f"{name.ljust(width)}  {value}")
    if transcript:
        click.echo()
        click.echo(as_markdown(found, conversation(events), max_output_lines=SHOWN_OUTPUT_LINES))
    click.echo(f"\nReattach with `betcode chat --session {found.id}`.")


@sessions_group.command("export")
@click.argument("session", shell_complete=SESSIONS.complete)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(EXPORT_FORMATS),
    default="md",
    show_default=True,
    help="md: a readable transcript; json: the session and its transcript entries; ndjson: "
    "every stored event, one a line.",
)
@click.option(
    "--output",
    "-o",
    type=click.File("w", encoding="utf-8"),
    default="-",
    help="File (default: stdout).",
)
@socket_option
def export(session: str, output_format: str, output: TextIO, socket_path: str | None) -> None:
    """Write SESSION's history (read from the store: no input lock is taken)."""

    async def gather(
        client: DaemonClient,
    ) -> tuple[agent_pb2.SessionSummary, list[agent_pb2.AgentEvent]]:
        found = await find_session(client, session)
        return found, await stored_events(client, found.id)

    found, events = call_daemon(socket_path, gather)
    if output_format == "ndjson":
        output.write(as_ndjson(events))
    elif output_format == "json":
        output.write(as_json(summary_json(found), conversation(events)) + "\n")
    else:
        output.write(as_markdown(found, conversation(events)))


@sessions_group.command("search")
@click.argument("words", nargs=-1, required=True)
@click.option(
    "--session",
    "session_ref",
    default="",
    shell_complete=SESSIONS.complete,
    help="Only this session's messages.",
)
@click.option(
    "--limit", type=click.IntRange(1, 500), default=20, show_default=True, help="At most this many."
)
@json_option
@socket_option
def search(
    words: tuple[str, ...], session_ref: str, limit: int, as_json: bool, socket_path: str | None
) -> None:
    """Messages of every session (or --session's) containing all WORDS (whole words, any case;
    end one with * to match the longer words it starts: deplo*). Newest first."""

    async def find(client: DaemonClient) -> history_pb2.SearchMessagesResponse:
        request = history_pb2.SearchMessagesRequest(
            query=" ".join(words),
            session_id=await session_id_of(client, session_ref),
            limit=limit,
        )
        stub = client.service_stub(history_pb2_grpc.HistoryServiceStub)
        return await client.call(stub.SearchMessages, request)

    hits = call_daemon(socket_path, find).hits
    if as_json:
        click.echo(json.dumps([hit_json(hit) for hit in hits], indent=2))
        return
    if not hits:
        click.echo("No messages match.")
        return
    rows = [
        (
            short_id(hit.session_id),
            hit.session_name or "-",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(hit.created_at.seconds)),
            hit.role,
            hit.snippet,
        )
        for hit in hits
    ]
    for line in table(("SESSION", "NAME", "TIME", "WHO", "MESSAGE"), rows):
        click.echo(line)


@sessions_group.command("adopt")
@click.argument("claude_session_id", required=False, default="")
@click.option("--cwd", type=click.Path(file_okay=False), help="The directory (default: here).")
@json_option
@socket_option
def adopt(claude_session_id: str, cwd: str | None, as_json: bool, socket_path: str | None) -> None:
    """Without CLAUDE_SESSION_ID: the conversations plain `claude` keeps for this directory.
    With it (or a unique start of it): adopt that one as a BetCode session that resumes it, its
    history included."""
    where = os.path.realpath(cwd or os.getcwd())

    def history(client: DaemonClient) -> history_pb2_grpc.HistoryServiceStub:
        return client.service_stub(history_pb2_grpc.HistoryServiceStub)

    async def conversations(client: DaemonClient) -> Sequence[history_pb2.ClaudeConversation]:
        listing = history_pb2.ListClaudeConversationsRequest(working_directory=where)
        listed: history_pb2.ListClaudeConversationsResponse = await client.call(
            history(client).ListClaudeConversations, listing
        )
        return listed.conversations

    async def adopt_it(client: DaemonClient) -> history_pb2.AdoptConversationResponse:
        # A unique start of the id, like every other id; anything else goes to the daemon as
        # given, which says what it does not have (exit 6).
        found = IdKind(
            "claude conversation",
            "betcode sessions adopt",
            conversations,
            lambda c: c.claude_session_id,
            lambda _c: "",
        )
        try:
            claude_id = (await found.find(client, claude_session_id)).claude_session_id
        except NotFound:
            claude_id = claude_session_id
        request = history_pb2.AdoptConversationRequest(
            claude_session_id=claude_id, working_directory=where
        )
        return await client.call(history(client).AdoptConversation, request)

    if claude_session_id:
        adopted = call_daemon(socket_path, adopt_it)
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "session_id": adopted.session_id,
                        "messages_imported": adopted.messages_imported,
                    }
                )
            )
            return
        click.echo(
            f"adopted as {adopted.session_id} ({adopted.messages_imported} earlier messages); "
            f"go on with `betcode chat --session {short_id(adopted.session_id)}`"
        )
        return
    found = call_daemon(socket_path, conversations)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "claude_session_id": c.claude_session_id,
                        "modified_at": c.modified_at.seconds,
                        "message_count": c.message_count,
                        "first_prompt": c.first_prompt,
                        "session_id": c.session_id,
                    }
                    for c in found
                ],
                indent=2,
            )
        )
        return
    if not found:
        click.echo(f"claude keeps no conversations for {where}.")
        return
    now = time.time()
    rows = [
        (
            c.claude_session_id,
            _ago(c.modified_at.seconds, now),
            str(c.message_count),
            f"session {short_id(c.session_id)}" if c.session_id else "-",
            _clip(c.first_prompt, MAX_PREVIEW),
        )
        for c in found
    ]
    for line in table(("CLAUDE SESSION", "ACTIVE", "MSGS", "ADOPTED", "FIRST PROMPT"), rows):
        click.echo(line)


def hit_json(hit: history_pb2.MessageHit) -> dict[str, Any]:
    return {
        "session_id": hit.session_id,
        "session_name": hit.session_name,
        "working_directory": hit.working_directory,
        "sequence": hit.sequence,
        "role": hit.role,
        "created_at": hit.created_at.ToNanoseconds() / 1e9,
        "snippet": hit.snippet,
    }


@sessions_group.command("rename")
@click.argument("session", shell_complete=SESSIONS.complete)
@click.argument("name")
@socket_option
def rename(session: str, name: str, socket_path: str | None) -> None:
    """Give SESSION the name NAME (shown by `list`)."""

    async def act(client: DaemonClient) -> str:
        found = await find_session(client, session)
        await client.rename_session(found.id, name)
        return found.id

    session_id = call_daemon(socket_path, act)
    click.echo(f"{session_id} is now named {name!r}")


@sessions_group.command("move")
@click.argument("session", shell_complete=SESSIONS.complete)
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@socket_option
def move(session: str, directory: str, socket_path: str | None) -> None:
    """Point SESSION at DIRECTORY (its own is gone, say): its conversation goes on there."""
    where = os.path.realpath(directory)

    async def act(client: DaemonClient) -> agent_pb2.SessionSummary:
        found = await find_session(client, session)
        return await client.move_session(found.id, where)

    moved = call_daemon(socket_path, act)
    click.echo(f"{moved.id} now works in {moved.working_directory}")


@sessions_group.command("delete")
@click.argument("session", shell_complete=SESSIONS.complete)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@socket_option
def delete(session: str, yes: bool, socket_path: str | None) -> None:
    """Stop SESSION and delete it with its whole history."""
    found = call_daemon(socket_path, lambda client: find_session(client, session))
    if not yes:
        click.confirm(
            f"Delete session {found.id} ({found.name or found.working_directory}) and its "
            f"{found.message_count} stored events?",
            abort=True,
        )
    call_daemon(socket_path, lambda client: client.delete_session(found.id))
    click.echo(f"deleted {found.id}")


@sessions_group.command("limit")
@click.argument("session", shell_complete=SESSIONS.complete)
@click.option("--cost-usd", "cost", metavar="USD", help="The session's own cost cap.")
@click.option("--clear", is_flag=True, help="Back to daemon.limits.session_cost_usd.")
@json_option
@socket_option
def limit(
    session: str, cost: str | None, clear: bool, as_json: bool, socket_path: str | None
) -> None:
    """Show SESSION's cost caps and spend, or give it its own cost cap (docs/LIMITS.md): once
    it has spent that much, its next message waits as a cost request until allowed. Exits 65
    for a cap that is not a positive number of USD."""
    if cost is not None and clear:
        raise click.UsageError("give --cost-usd USD or --clear, not both")
    change = cost is not None or clear
    cost_usd = _cost_cap(cost) if cost is not None else None

    async def act(client: DaemonClient) -> tuple[str, agent_pb2.SetSessionLimitsResponse]:
        found = await find_session(client, session)
        if change:
            return found.id, await client.set_session_limits(found.id, cost_usd)
        return found.id, await client.get_session_limits(found.id)

    session_id, spend = call_daemon(socket_path, act)
    if as_json:
        data = json_format.MessageToDict(
            spend, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        click.echo(json.dumps({"session_id": session_id, **data}, indent=2))
        return
    cap = f"${spend.cost_limit_usd:.4f}" if spend.cost_limit_usd else "none"
    whose = "its own" if spend.own_limit else "daemon.limits.session_cost_usd"
    click.echo(f"{session_id}: cost limit {cap} ({whose}); spent ${spend.spent_usd:.4f}")
    daily = f"${spend.daily_limit_usd:.4f}" if spend.daily_limit_usd else "none"
    click.echo(
        f"today, every session: spent ${spend.day_spent_usd:.4f}; "
        f"daily limit {daily} (daemon.limits.daily_cost_usd)"
    )


def _cost_cap(text: str) -> float:
    """A cap in USD, or exit 65 (a value not allowed, as for settings)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        click.echo(f"betcode: --cost-usd {text!r} is not a positive number of USD", err=True)
        sys.exit(EXIT_CONFIG_INVALID)
    return value


@sessions_group.command("grants")
@click.argument("session", shell_complete=SESSIONS.complete)
@json_option
@socket_option
def grants(session: str, as_json: bool, socket_path: str | None) -> None:
    """What SESSION allows (or denies) without asking, from "allow for this session"."""

    async def gather(client: DaemonClient) -> list[agent_pb2.SessionGrantEntry]:
        found = await find_session(client, session)
        return await client.list_session_grants(found.id)

    entries = call_daemon(socket_path, gather)
    if as_json:
        click.echo(json.dumps([grant_json(entry) for entry in entries], indent=2))
    elif not entries:
        click.echo("No session grants.")
    else:
        rows = [("allow" if e.granted else "deny", e.tool_name) for e in entries]
        for line in table(("ACTION", "RULE"), rows):
            click.echo(line)


def _cost_text(summary: agent_pb2.SessionSummary) -> str:
    spent = f"${summary.total_cost_usd:.4f}"
    if not summary.cost_limit_usd:
        return spent
    return f"{spent} of its ${summary.cost_limit_usd:.4f} limit"


def summary_json(summary: agent_pb2.SessionSummary) -> dict[str, Any]:
    data = json_format.MessageToDict(
        summary, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    data["created_at"] = summary.created_at.seconds
    data["updated_at"] = summary.updated_at.seconds
    return data


def grant_json(entry: agent_pb2.SessionGrantEntry) -> dict[str, Any]:
    return {"rule": entry.tool_name, "action": "allow" if entry.granted else "deny"}


def grant_text(entry: agent_pb2.SessionGrantEntry) -> str:
    return f"{'allow' if entry.granted else 'deny'} {entry.tool_name}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two blanks apart; the last column is not padded."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        return "  ".join([*cells, row[-1]]).rstrip()

    return [line(header), *(line(row) for row in rows)]


AGE_UNITS = (("d", 86400), ("h", 3600), ("m", 60))


def _ago(then: int, now: float) -> str:
    """How long ago, in its largest unit only ("3h ago"): a list needs no more."""
    if not then:
        return "-"
    seconds = max(0, int(now - then))
    for unit, size in AGE_UNITS:
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
