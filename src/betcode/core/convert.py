"""Stored rows → betcode.v1 messages for unary responses."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence

from google.protobuf import struct_pb2, timestamp_pb2

from betcode.sessions.event_builders import question_prompts
from betcode.storage.pending import PendingPermission
from betcode.storage.sessions import SessionRecord
from betcode.v1 import agent_pb2


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1_000_000_000))
    return stamp


def session_summary(record: SessionRecord) -> agent_pb2.SessionSummary:
    return agent_pb2.SessionSummary(
        id=record.id,
        model=record.model,
        working_directory=record.working_directory,
        worktree_id=record.worktree_id or "",
        status=record.status,
        message_count=record.message_count,
        total_input_tokens=min(record.total_input_tokens, 2**32 - 1),
        total_output_tokens=min(record.total_output_tokens, 2**32 - 1),
        total_cost_usd=record.total_cost_usd,
        created_at=timestamp(record.created_at),
        updated_at=timestamp(record.updated_at),
        last_message_preview=record.last_message_preview or "",
        name=record.name,
    )


async def session_summaries(records: Sequence[SessionRecord]) -> list[agent_pb2.SessionSummary]:
    """`session_summary` of each, with whether its directory is gone (looked at off the loop)."""
    missing = await asyncio.to_thread(
        lambda: [not os.path.isdir(record.working_directory) for record in records]
    )
    summaries = [session_summary(record) for record in records]
    for summary, gone in zip(summaries, missing, strict=True):
        summary.directory_missing = gone
    return summaries


def pending_permission(row: PendingPermission) -> agent_pb2.PendingPermission:
    stored = json.loads(row.input)
    # claude always sends an object; anything else is shown as an empty input, never a crash.
    tool_input = stored if isinstance(stored, dict) else {}
    struct = struct_pb2.Struct()
    struct.update(tool_input)
    return agent_pb2.PendingPermission(
        request_id=row.request_id,
        session_id=row.session_id,
        tool_name=row.tool_name,
        description=row.tool_description or "",
        input=struct,
        received_at=timestamp(row.received_at),
        expires_at=timestamp(row.expires_at),
        is_question=row.is_question,
        questions=question_prompts(tool_input) if row.is_question else [],
    )
