"""Tunnel frames between relay instances, over NATS, whose messages are limited in size (its
``max_payload``: 8 MiB on our nats-server) while one relayed message may be up to
``frames.MAX_MESSAGE_BYTES``. A frame too big for one NATS message goes as several, in order:
each a slice of the serialized frame (a data frame's ciphertext, sealed end to end, is cut, never
read), with the header ``PART_HEADER`` naming its call and whether more slices follow. The
receiving relay joins them back into the frame, refusing (RESOURCE_EXHAUSTED) one that grows over
``frames.MAX_FRAME_BYTES``, so a peer cannot make it buffer without bound.

Only relays that say so take slices: the router offers ``CAPABILITY_HEADER`` with the call's
opening request and the tunnel's holder answers it with the same header. A relay of an older
version (which would drop slices as undecodable frames) does neither, so with it a frame over
NATS's ``max_payload`` still ends its call with RESOURCE_EXHAUSTED (docs/RELAY.md). The daemon
never sees slices: its tunnel is a gRPC stream carrying whole frames."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from betcode.remote import frames
from betcode.v1 import tunnel_pb2

CAPABILITY_HEADER = "x-betcode-fragments"
CAPABILITY = "1"
PART_HEADER = "x-betcode-part"  # "<request_id> more" or "<request_id> last"
# Room left in each NATS message for its headers and protocol line.
HEADROOM_BYTES = 4096


def offered(msg: Msg) -> bool:
    """Whether a NATS message (an opening request, or its answer) says its relay joins slices."""
    return (msg.headers or {}).get(CAPABILITY_HEADER) == CAPABILITY


def too_large(request_id: str, size: int, limit: int) -> tunnel_pb2.TunnelFrame:
    """The error that ends a call whose message is over what the relay carries: told to both
    ends, so neither waits for a message that never comes."""
    return frames.error_frame(
        request_id,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"a message of {size} bytes is over the {limit} bytes the relay carries",
    )


def carried_limit(nc: Nats, sliced: bool) -> int:
    """The largest serialized frame a call can send over NATS: any up to MAX_FRAME_BYTES when
    its peer relay joins slices, else one NATS message."""
    return frames.MAX_FRAME_BYTES if sliced else nc.max_payload


async def publish(nc: Nats, subject: str, request_id: str, data: bytes) -> None:
    """One serialized frame, as one NATS message when it fits, else as slices in order."""
    size = nc.max_payload - HEADROOM_BYTES
    if len(data) <= size:
        await nc.publish(subject, data)
        return
    for start in range(0, len(data), size):
        more = "more" if start + size < len(data) else "last"
        await nc.publish(
            subject, data[start : start + size], headers={PART_HEADER: f"{request_id} {more}"}
        )


class Joiner:
    """Joins the slices of frames, per call open here (`is_open`; slices of any other call are
    dropped). A call whose frame grew over the limit is refused once; its remaining slices are
    dropped."""

    def __init__(self, is_open: Callable[[str], bool], limit: int = frames.MAX_FRAME_BYTES) -> None:
        self._is_open = is_open
        self._limit = limit
        self._parts: dict[str, list[bytes]] = {}
        self._sizes: dict[str, int] = {}
        self._refused: set[str] = set()

    def take(self, msg: Msg) -> bytes | tunnel_pb2.TunnelFrame | None:
        """A NATS message's frame bytes: whole (a message that is no slice, or the last slice
        of a frame), None while slices are still to come, or the RESOURCE_EXHAUSTED error frame
        that ends a call whose frame is over the limit."""
        part = (msg.headers or {}).get(PART_HEADER)
        if part is None:
            return msg.data
        request_id, _, more = part.partition(" ")
        last = more != "more"
        if request_id in self._refused or not self._is_open(request_id):
            if last:
                self.forget(request_id)
            return None
        size = self._sizes.get(request_id, 0) + len(msg.data)
        if size > self._limit:
            self.forget(request_id)
            if not last:
                self._refused.add(request_id)
            return too_large(request_id, size, self._limit)
        self._parts.setdefault(request_id, []).append(msg.data)
        self._sizes[request_id] = size
        if not last:
            return None
        self._sizes.pop(request_id)
        return b"".join(self._parts.pop(request_id))

    def forget(self, request_id: str) -> None:
        """A call that ended: the slices it had sent are dropped."""
        self._parts.pop(request_id, None)
        self._sizes.pop(request_id, None)
        self._refused.discard(request_id)
