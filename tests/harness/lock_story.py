"""The input-lock events of a stream, in order, in a form tests compare against."""

from __future__ import annotations

from collections.abc import Iterable

from betcode.v1 import agent_pb2


def lock_story(events: Iterable[agent_pb2.AgentEvent]) -> list[tuple[object, ...]]:
    """("moved", holder) for an InputLockChange, (state, requester, holder) for a request."""
    story: list[tuple[object, ...]] = []
    for event in events:
        if event.HasField("input_lock"):
            story.append(("moved", event.input_lock.holder_client_id))
        elif event.HasField("input_lock_requested"):
            asked = event.input_lock_requested
            story.append((asked.state, asked.requested_by_client_id, asked.holder_client_id))
    return story
