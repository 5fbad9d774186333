"""WatchSubagent: the subagent session's AgentEvents (`watch_frames`), told as SubagentEvents
(`subagent_events`).

The session's own log is the source (replayed like any session's, then live), so a watcher
that reconnects with `from_sequence` misses nothing and sees nothing twice; the stream ends
with the subagent's settled end (completed, failed or cancelled).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from betcode.storage import subagents as rows
from betcode.storage.reader import StoreReader
from betcode.subagents.manager import SubagentManager
from betcode.v1 import agent_pb2
from betcode.v1 import subagent_pb2 as pb

Frames = AsyncIterator[tuple[rows.SubagentRow, list[tuple[int, bytes]]]]


async def watch_frames(
    subagents: SubagentManager,
    reader: StoreReader,
    subagent_id: str,
    after_seq: int,
    watcher_id: str,
) -> Frames:
    """The subagent session's events after `after_seq` (replay, then live) until it has
    finished and everything it wrote was delivered; then one last empty batch with the
    settled row."""
    row = await subagents.get(subagent_id)
    run = subagents.runs.get(subagent_id)
    session = await subagents.sessions.get(row.session_id)
    last = after_seq
    if run is not None:
        stream = session.attach(
            watcher_id, after_seq, max_count=256, max_bytes=1 << 20, takes_input=False
        )
        try:
            while True:
                batch_next: asyncio.Future[list[tuple[int, bytes]]] = asyncio.ensure_future(
                    anext(stream)
                )
                either: list[asyncio.Future[Any]] = [batch_next, run.finished]
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                if not batch_next.done():
                    batch_next.cancel()
                    await asyncio.gather(batch_next, return_exceptions=True)
                    break
                batch = batch_next.result()
                if batch:
                    last = max(last, batch[-1][0])
                    yield row, batch
        finally:
            await stream.aclose()
    while True:  # whatever was committed until the end
        page = await reader.read_events(session.id, last, 500)
        if not page:
            break
        last = page[-1][0]
        yield row, page
    yield await subagents.get(subagent_id), []


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
