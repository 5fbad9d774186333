"""Pumping a client's attachment to a session into its outbox, batch by batch: the same for a
gRPC stream and a web socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any

from betcode.sessions.session import StreamsEnded

log = logging.getLogger(__name__)

PER_EVENT_BATCH = 64  # frames taken per wake-up on the per-event stream
BATCH_MAX_EVENTS = 256
BATCH_MAX_BYTES = 4 * 1024 * 1024
OUTBOX_BATCHES = 4  # small, so a slow client backs up into its lag-detecting queue


async def pump_batches(
    stream: AsyncGenerator[list[Any], None], outbox: asyncio.Queue[list[bytes] | None]
) -> None:
    # aclosing: a pump cancelled while waiting on the outbox closes the attachment at once
    # (input lock, subscription), not when the generator is garbage-collected.
    async with contextlib.aclosing(stream):
        try:
            async for batch in stream:
                await outbox.put([data for _, data in batch])
        except StreamsEnded:
            pass  # the daemon is stopping: the stream's owner says so to its client
        except Exception:
            log.exception("event stream failed")
    await outbox.put(None)
