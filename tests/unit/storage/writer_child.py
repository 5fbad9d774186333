"""A writer process for the kill -9 test: appends lines + events forever and prints the line
seq of every append whose commit callback reported success (so the parent knows what was
durably committed before it kills this process)."""

from __future__ import annotations

import asyncio
import sys
import time
from functools import partial

from betcode.storage import EventRow, MessageRow, StoreWriter, open_database
from betcode.storage.sessions import create_session

PAYLOAD = b'{"type":"stream_event","event":{"delta":{"text":"' + b"x" * 640 + b'"}}}'


class Progress:
    committed = 0

    @classmethod
    def confirm(cls, line: int, ok: bool) -> None:
        if ok:
            cls.committed = line
            print(line, flush=True)


async def main(path: str) -> None:
    writer = StoreWriter(open_database(path))
    await writer.call(
        lambda c: create_session(
            c, session_id="s1", model="m", working_directory="/", now=time.time()
        )
    )
    line = 0
    while True:
        if line - Progress.committed > 500:  # keep a bounded backlog in flight
            await asyncio.sleep(0.001)
            continue
        for _ in range(20):
            line += 1
            now = time.time()
            writer.append(
                [
                    MessageRow("s1", line, "out", "stream_event", PAYLOAD, now),
                    EventRow("s1", 2 * line - 1, line, "text_delta", PAYLOAD, now),
                    EventRow("s1", 2 * line, line, "text_delta", PAYLOAD, now),
                ],
                partial(Progress.confirm, line),
            )
        await asyncio.sleep(0)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
