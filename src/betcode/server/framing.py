"""Wire bytes of an AgentEventBatch built from already-serialized AgentEvents.

``AgentEventBatch`` has a single field, ``1: repeated AgentEvent events``. A repeated message
field is encoded as one record per element: the tag byte 0x0A (field 1, wire type 2 =
length-delimited), the element's length as a varint, then its bytes. So a batch is just those
records concatenated, and the events serialized once at commit time are never parsed again.
"""

from __future__ import annotations

from collections.abc import Sequence

_EVENTS_FIELD_TAG = b"\x0a"


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_event_batch(frames: Sequence[bytes]) -> bytes:
    """The serialized ``AgentEventBatch`` whose ``events`` are ``frames``, in order."""
    parts: list[bytes] = []
    for frame in frames:
        parts.append(_EVENTS_FIELD_TAG)
        parts.append(_varint(len(frame)))
        parts.append(frame)
    return b"".join(parts)
