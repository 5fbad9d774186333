"""Small steps of an independent client on the generated stubs: open, wait for headers, read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
import grpc.aio

from betcode.v1 import agent_pb2

# Generous: only a hang fails. A tonic client gives up after 30 s; nothing here waits that long.
HEADERS_WITHIN_S = 10.0
TURN_WITHIN_S = 60.0
PLAIN_PROMPT = 'SCN:plain {"text": "Hello from the mock model."} say hello'

AgentEvent = agent_pb2.AgentEvent
T = TypeVar("T")


@dataclass(frozen=True)
class Served:
    """Where the daemon answers, and a project folder to run sessions in."""

    unix: str
    tcp: str
    project: Path

    def address(self, transport: str) -> str:
        return self.tcp if transport == "tcp" else self.unix


def kind(event: AgentEvent) -> str:
    return str(event.WhichOneof("event"))


def start_request(**fields: object) -> agent_pb2.AgentRequest:
    return agent_pb2.AgentRequest(start=agent_pb2.StartConversation(**fields))  # type: ignore[arg-type]


def message_request(text: str) -> agent_pb2.AgentRequest:
    return agent_pb2.AgentRequest(message=agent_pb2.UserMessage(content=text))


async def headers_of(call: grpc.aio.Call) -> grpc.aio.Metadata:
    """The call's response headers, waited for before anything is written (as tonic does)."""
    return await asyncio.wait_for(call.initial_metadata(), HEADERS_WITHIN_S)


async def read_until(
    call: grpc.aio.StreamStreamCall | grpc.aio.UnaryStreamCall,
    wanted: str,
    within_s: float = TURN_WITHIN_S,
) -> list[AgentEvent]:
    """Every event read, up to and including the first of kind `wanted`."""
    events: list[AgentEvent] = []
    async with asyncio.timeout(within_s):
        while True:
            event = await call.read()
            if event is grpc.aio.EOF:
                raise AssertionError(f"the stream ended before a {wanted} event: {events}")
            events.append(event)
            if kind(event) == wanted:
                return events


async def collect(calls: AsyncIterator[T], within_s: float = TURN_WITHIN_S) -> list[T]:
    """Every message of a stream that must END within `within_s`."""
    async with asyncio.timeout(within_s):
        return [event async for event in calls]
