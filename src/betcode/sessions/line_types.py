"""The `messages.message_type` of a stored line: claude's top-level NDJSON `type`."""

from __future__ import annotations

from betcode.protocol.kinds import wire_type
from betcode.protocol.messages import Message

INVALID_LINE = "invalid"  # not JSON / not UTF-8: stored as it came, for the record


def line_type(message: Message | None) -> str:
    if message is None:
        return INVALID_LINE
    return wire_type(message)
