"""A benchmark client process: many gRPC streams on one session, driven by benchmarks/run.py.

    .venv/bin/python benchmarks/bench_clients.py SOCKET

Jobs arrive one JSON object per stdin line; answers leave one JSON object per stdout line:

* {"op": "watch", "session": ID, "after": SEQ, "streams": N, "batched": BOOL, "stamps": BOOL}
  opens N ResumeSession (or ResumeSessionBatched) streams, each on its own channel, from
  after - 1: the replayed event `after` proves the server subscribed the stream, so once all N
  have it the process answers {"ready": N}. Each stream then counts the events after `after`
  until a TurnComplete, and the process answers {"counts": [per stream], "done_ns": the last
  TurnComplete's CLOCK_MONOTONIC arrival, "arrivals": [[seq, ns], ...] with stamps}.
* {"op": "hold", "sessions": [ID, ...], "streams": N} attaches N per-event streams from 0,
  spread over the sessions, answers {"ready": N} once each has an event, and keeps them open
  until the next job line (or EOF).

Running in its own process keeps the clients' CPU out of the daemon's figures (they still
share the machine's cores, as real clients would).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import grpc

from betcode.v1 import agent_pb2, agent_pb2_grpc

CHANNEL_OPTIONS = (
    ("grpc.use_local_subchannel_pool", 1),  # one connection per client, not one shared
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
)


class Stream:
    """One client: its own channel and one ResumeSession(Batched) call."""

    def __init__(self, socket: str, session_id: str, after: int, batched: bool) -> None:
        self.channel = grpc.aio.insecure_channel(f"unix:{socket}", options=CHANNEL_OPTIONS)
        stub = agent_pb2_grpc.AgentServiceStub(self.channel)
        method = stub.ResumeSessionBatched if batched else stub.ResumeSession
        request = agent_pb2.ResumeSessionRequest(
            session_id=session_id, from_sequence=after, follow=True
        )
        self.call = method(request, metadata=(("x-client-id", "bench"),))
        self.batched = batched

    async def messages(self) -> Any:
        async for message in self.call:
            for event in message.events if self.batched else (message,):
                yield event

    async def close(self) -> None:
        self.call.cancel()
        await self.channel.close()


async def watch_one(
    stream: Stream, after: int, stamps: bool, attached: Callable[[], None]
) -> tuple[int, int, list[tuple[int, int]]]:
    """(events after `after`, TurnComplete arrival ns, [(seq, arrival ns)] with stamps)."""
    count = 0
    arrivals: list[tuple[int, int]] = []
    announced = False
    async for event in stream.messages():
        now = time.monotonic_ns()
        if not announced:
            announced = True
            attached()
        if event.sequence <= after:
            continue
        count += 1
        if stamps:
            arrivals.append((event.sequence, now))
        if event.WhichOneof("event") == "turn_complete":
            return count, now, arrivals
    raise RuntimeError("a watched stream ended before the TurnComplete")


async def all_attached(streams: list[Stream], attach: Callable[[Any], Any]) -> list[Any]:
    """Start one task per stream, answer {"ready": N} once every stream is subscribed."""
    remaining = len(streams)
    ready = asyncio.Event()

    def attached() -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0:
            ready.set()

    tasks = [asyncio.create_task(attach((stream, attached))) for stream in streams]
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if not ready.is_set():
        for task in tasks:
            if task.done():
                task.result()  # a stream failed before attaching: raise its error
    await waiter
    answer({"ready": len(streams)})
    return tasks


async def watch(socket: str, job: dict[str, Any]) -> None:
    after = int(job["after"])
    streams = [
        Stream(socket, job["session"], after - 1, bool(job["batched"]))
        for _ in range(int(job["streams"]))
    ]
    stamps = bool(job.get("stamps", False))
    tasks = await all_attached(streams, lambda pair: watch_one(pair[0], after, stamps, pair[1]))
    results = await asyncio.gather(*tasks)
    for stream in streams:
        await stream.close()
    answer(
        {
            "counts": [count for count, _, _ in results],
            "done_ns": max(done for _, done, _ in results),
            "arrivals": [pair for _, _, arrivals in results for pair in arrivals],
        }
    )


async def hold(socket: str, job: dict[str, Any], next_line: Callable[[], Any]) -> None:
    sessions = list(job["sessions"])
    streams = [
        Stream(socket, sessions[i % len(sessions)], 0, False) for i in range(int(job["streams"]))
    ]

    async def first_event(pair: tuple[Stream, Callable[[], None]]) -> None:
        async for _ in pair[0].messages():
            pair[1]()
            return

    tasks = await all_attached(streams, first_event)
    await asyncio.gather(*tasks)
    await next_line()
    for stream in streams:
        await stream.close()


def answer(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def serve(socket: str) -> None:
    loop = asyncio.get_running_loop()

    async def next_line() -> str:
        return await loop.run_in_executor(None, sys.stdin.readline)

    while line := await next_line():
        job = json.loads(line)
        if job["op"] == "watch":
            await watch(socket, job)
        elif job["op"] == "hold":
            await hold(socket, job, next_line)
        else:
            raise ValueError(f"unknown job {job['op']!r}")


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
