"""A session's stored history as a transcript: what the user said, what claude answered, the
tools it ran and the permission answers, in order (`sessions show --transcript`, `sessions
export`). Read with ResumeSessionBatched with follow off: the stored events only, without
attaching as a Converse client, so no input lock is taken and claude is not started.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import grpc
from google.protobuf import json_format

from betcode.cli.connection import DaemonClient, daemon_error
from betcode.v1 import agent_pb2

MAX_INPUT_CHARS = 200  # of a tool call's input, in text


@dataclass(frozen=True)
class Entry:
    """One step of the conversation. `role`: user | assistant | tool_call (text: its input as
    JSON) | tool_result (text: its output) | permission | error."""

    sequence: int  # of the event that ended it
    at: float  # Unix seconds
    role: str
    text: str
    tool: str = ""  # the tool's name (tool_call, tool_result)
    is_error: bool = False


async def stored_events(client: DaemonClient, session_id: str) -> list[agent_pb2.AgentEvent]:
    """Every stored event of the session, oldest first."""
    call = client.open_resume_batched(session_id, 0, follow=False)
    events: list[agent_pb2.AgentEvent] = []
    try:
        async for batch in call:
            events.extend(batch.events)
    except grpc.aio.AioRpcError as error:
        raise daemon_error(error, client.address) from None
    return events


def transcript(events: Sequence[agent_pb2.AgentEvent]) -> list[Entry]:
    """The conversation of the session itself (claude's own subagents' output is left out:
    their result reaches the transcript as the Task tool's output)."""
    entries: list[Entry] = []
    text: list[str] = []
    tools: dict[str, str] = {}  # tool id → name
    for event in events:
        if event.parent_tool_use_id:
            continue
        at = event.timestamp.ToNanoseconds() / 1e9
        kind = event.WhichOneof("event")
        if kind == "text_delta":
            text.append(event.text_delta.text)
            if event.text_delta.is_complete and "".join(text).strip():
                entries.append(Entry(event.sequence, at, "assistant", "".join(text).strip()))
            if event.text_delta.is_complete:
                text = []
        elif kind == "user_input":
            entries.append(Entry(event.sequence, at, "user", event.user_input.content))
        elif kind == "tool_call_start":
            start = event.tool_call_start
            tools[start.tool_id] = start.tool_name
            shown = json.dumps(json_format.MessageToDict(start.input), ensure_ascii=False)
            entries.append(
                Entry(
                    event.sequence, at, "tool_call", _clip(shown, MAX_INPUT_CHARS), start.tool_name
                )
            )
        elif kind == "tool_call_result":
            result = event.tool_call_result
            name = tools.get(result.tool_id, "")
            entries.append(
                Entry(
                    event.sequence, at, "tool_result", result.output, name, is_error=result.is_error
                )
            )
        elif kind == "permission_resolved":
            resolved = event.permission_resolved
            said = f": {resolved.message}" if resolved.message else ""
            entries.append(
                Entry(
                    event.sequence,
                    at,
                    "permission",
                    f"{resolved.request_id} {resolved.outcome}{said}",
                )
            )
        elif kind == "error":
            error = event.error
            entries.append(
                Entry(event.sequence, at, "error", f"{error.code}: {error.message}", is_error=True)
            )
    return entries


ROLE_TITLES = {"user": "You", "assistant": "Claude", "error": "Error"}


def as_markdown(
    summary: agent_pb2.SessionSummary, entries: Sequence[Entry], *, max_output_lines: int = 0
) -> str:
    """The transcript as Markdown; tool outputs cut to `max_output_lines` (0: whole)."""
    model = summary.model or "claude's default"
    lines = [
        f"# {summary.name or 'Session ' + summary.id}",
        "",
        f"- session: `{summary.id}`",
        f"- directory: `{summary.working_directory}`",
        f"- model: {model}",
        f"- cost: ${summary.total_cost_usd:.4f}",
        "",
    ]
    for entry in entries:
        when = datetime.fromtimestamp(entry.at).strftime("%Y-%m-%d %H:%M:%S")
        if entry.role in ROLE_TITLES:
            lines += [f"## {ROLE_TITLES[entry.role]} · {when}", "", entry.text, ""]
        elif entry.role == "permission":
            lines += [f"> permission {entry.text}", ""]
        elif entry.role == "tool_call":
            lines += [f"**{entry.tool}** `{entry.text}`", ""]
        else:
            lines += _output_lines(entry, max_output_lines)
    return "\n".join(lines).rstrip() + "\n"


def _output_lines(entry: Entry, max_output_lines: int) -> list[str]:
    output = entry.text.splitlines()
    cut = max_output_lines and len(output) > max_output_lines
    if cut:
        output = [*output[:max_output_lines], f"… ({len(entry.text.splitlines())} lines)"]
    fence = "```"
    title = "error output" if entry.is_error else "output"
    return [f"{title}:", "", fence, *output, fence, ""]


def as_json(summary: dict[str, Any], entries: Sequence[Entry]) -> str:
    return json.dumps({"session": summary, "entries": [asdict(e) for e in entries]}, indent=2)


def as_ndjson(events: Sequence[agent_pb2.AgentEvent]) -> str:
    """Every stored event, one JSON object a line (the wire's field names)."""
    return "".join(
        json.dumps(json_format.MessageToDict(event, preserving_proto_field_name=True)) + "\n"
        for event in events
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
