"""The turn queue on its own (limits/turn_queue.py): order, one turn per session, places that
come free when a turn ends, fails to start, or its session closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from betcode.limits.turn_queue import TurnQueue
from betcode.sessions.session import Session
from betcode.sessions.turns import TurnEnd
from betcode.v1 import agent_pb2, common_pb2


class StandIn:
    """What the queue touches of a session."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.closed = False
        self.turn_listeners: list[Callable[[TurnEnd], None]] = []
        self.shown: list[agent_pb2.AgentEvent] = []

    def emit(self, events: list[agent_pb2.AgentEvent]) -> list[object]:
        self.shown.extend(events)
        return []

    def end_turn(self) -> None:
        for listener in list(self.turn_listeners):
            listener(TurnEnd(True, "", 0))

    def queue_statuses(self) -> list[str]:
        return [
            event.status_change.message
            for event in self.shown
            if event.status_change.status == common_pb2.AGENT_STATUS_QUEUED
        ]


class Started:
    def __init__(self) -> None:
        self.texts: list[str] = []
        self.refuse: set[str] = set()

    async def __call__(self, session: Session, client_id: str | None, text: str) -> bool:
        if text in self.refuse:
            return False
        self.texts.append(text)
        return True


def as_session(stand_in: StandIn) -> Session:
    return cast("Session", stand_in)


async def settle() -> None:
    """Let the started turns' tasks run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_turns_start_in_order_one_per_session() -> None:
    started = Started()
    queue = TurnQueue(1, started)
    a, b, c = StandIn("a"), StandIn("b"), StandIn("c")
    await queue.submit(as_session(a), "client", "a1")
    await queue.submit(as_session(b), "client", "b1")
    await queue.submit(as_session(b), "client", "b2")
    await queue.submit(as_session(c), "client", "c1")
    assert started.texts == ["a1"]
    assert (queue.running, queue.waiting) == (1, 3)
    assert b.queue_statuses()[-1] == "queued: 1 of 3 waiting for a turn slot"
    assert c.queue_statuses()[-1] == "queued: 3 of 3 waiting for a turn slot"
    a.end_turn()
    await settle()
    assert started.texts == ["a1", "b1"]
    assert c.queue_statuses()[-1] == "queued: 2 of 2 waiting for a turn slot"
    b.end_turn()
    await settle()
    # b2 came before c1, but b's place was taken first by b1: they start in the order given.
    assert started.texts == ["a1", "b1", "b2"]
    b.end_turn()
    await settle()
    assert started.texts == ["a1", "b1", "b2", "c1"]


async def test_a_place_comes_free_when_a_turn_is_held_or_its_session_closes() -> None:
    started = Started()
    queue = TurnQueue(1, started)
    a, b, c = StandIn("a"), StandIn("b"), StandIn("c")
    await queue.submit(as_session(a), None, "a1")
    started.refuse.add("b1")  # held (a cost request): no turn starts, nothing ends one
    await queue.submit(as_session(b), None, "b1")
    await queue.submit(as_session(c), None, "c1")
    a.closed = True  # deleted mid-turn: no turn end comes
    queue.apply(1)
    await settle()
    assert started.texts == ["a1", "c1"]
    assert (queue.running, queue.waiting) == (1, 0)


async def test_a_cancel_takes_only_the_session_s_messages_out() -> None:
    queue = TurnQueue(1, Started())
    a, b, c = StandIn("a"), StandIn("b"), StandIn("c")
    for stand_in, text in ((a, "a1"), (b, "b1"), (c, "c1"), (b, "b2")):
        await queue.submit(as_session(stand_in), None, text)
    assert queue.cancel(as_session(b)) == 2
    assert queue.cancel(as_session(b)) == 0
    assert queue.waiting == 1
    assert b.shown[-1].status_change.message == "cancelled: 2 queued message(s) not sent"
    assert c.queue_statuses()[-1] == "queued: 1 of 1 waiting for a turn slot"
