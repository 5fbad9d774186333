"""WatchSubagent's events: the subagent session's AgentEvents told as SubagentEvents.

The session's own log is the source (replayed like any session's, then live), so a watcher
that reconnects with `from_sequence` misses nothing and sees nothing twice; the stream ends
with the subagent's settled end (completed, failed or cancelled).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from google.protobuf.timestamp_pb2 import Timestamp

from betcode.storage import subagents as rows
from betcode.v1 import agent_pb2
from betcode.v1 import subagent_pb2 as pb

Frames = AsyncIterator[tuple[rows.SubagentRow, list[tuple[int, bytes]]]]


async def subagent_events(frames: Frames) -> AsyncIterator[pb.SubagentEvent]:
    started = False
    async for row, batch in frames:
        if not started:
            started = True
            yield _event(
                row.id, 0, started=pb.SubagentStarted(session_id=row.session_id, model=row.model)
            )
        if not batch:
            end = final_event(row)
            if end is not None:
                yield end
            continue
        for seq, payload in batch:
            event = from_agent_event(row.id, seq, agent_pb2.AgentEvent.FromString(payload))
            if event is not None:
                yield event


def from_agent_event(
    subagent_id: str, seq: int, event: agent_pb2.AgentEvent
) -> pb.SubagentEvent | None:
    kind = event.WhichOneof("event")
    if kind == "text_delta" and not event.parent_tool_use_id:
        delta = event.text_delta
        output = pb.SubagentOutput(text=delta.text, is_complete=delta.is_complete)
        return _event(subagent_id, seq, output=output)
    if kind == "tool_call_start":
        call = event.tool_call_start
        return _event(
            subagent_id,
            seq,
            tool_use=pb.SubagentToolUse(
                tool_id=call.tool_id, tool_name=call.tool_name, description=call.description
            ),
        )
    if kind == "permission_request":
        request = event.permission_request
        return _event(
            subagent_id,
            seq,
            permission_request=pb.SubagentPermissionRequest(
                request_id=request.request_id,
                tool_name=request.tool_name,
                description=request.description,
            ),
        )
    return None


def final_event(row: rows.SubagentRow) -> pb.SubagentEvent | None:
    if row.status == "completed":
        done = pb.SubagentCompleted(
            exit_code=row.exit_code or 0, result_summary=row.result_summary or ""
        )
        return _event(row.id, 0, completed=done)
    if row.status == "failed":
        failed = pb.SubagentFailed(
            exit_code=row.exit_code or -1, error_message=row.error_message or ""
        )
        return _event(row.id, 0, failed=failed)
    if row.status == "cancelled":
        return _event(row.id, 0, cancelled=pb.SubagentCancelled(reason=row.error_message or ""))
    return None


def _event(subagent_id: str, seq: int, **kind: object) -> pb.SubagentEvent:
    stamp = Timestamp()
    stamp.GetCurrentTime()
    return pb.SubagentEvent(subagent_id=subagent_id, timestamp=stamp, sequence=seq, **kind)  # type: ignore[arg-type]
