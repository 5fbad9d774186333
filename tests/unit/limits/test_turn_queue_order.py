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
    """Starts turns; a queued message's row goes as it starts (in the real daemon: in the
    transaction that records its line, or its cost request)."""

    def __init__(self, store: RowsStore | None = None) -> None:
        self.texts: list[str] = []
        self.refuse: set[str] = set()
        self.store = store

    async def __call__(
        self, session: Session, client_id: str | None, text: str, queued_id: int | None, key: str
    ) -> bool:
        if self.store is not None and queued_id is not None:
            self.store.remove([queued_id])
        if text in self.refuse:
            return False
        self.texts.append(text)
        return True


class RowsStore:
    """The queue's store, in memory: what a restarted daemon would queue again."""

    def __init__(self) -> None:
        self.rows: dict[int, str] = {}

    async def add(self, session_id: str, text: str, idempotency_key: str) -> int:
        row_id = len(self.rows) + 100
        self.rows[row_id] = text
        return row_id

    def remove(self, row_ids: list[int]) -> None:
        for row_id in row_ids:
            del self.rows[row_id]


def as_session(stand_in: StandIn) -> Session:
    return cast("Session", stand_in)


async def settle() -> None:
    """Let the started turns' tasks run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_turns_start_in_order_one_per_session() -> None:
    store = RowsStore()
    started = Started(store)
    queue = TurnQueue(1, started, store)
    a, b, c = StandIn("a"), StandIn("b"), StandIn("c")
    await queue.submit(as_session(a), "client", "a1")
    await queue.submit(as_session(b), "client", "b1")
    await queue.submit(as_session(b), "client", "b2")
    await queue.submit(as_session(c), "client", "c1")
    assert started.texts == ["a1"]
    assert (queue.running, queue.waiting) == (1, 3)
    assert sorted(store.rows.values()) == ["b1", "b2", "c1"]  # a1 started at once
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
    assert store.rows == {}


async def test_a_place_comes_free_when_a_turn_is_held_or_its_session_closes() -> None:
    started = Started()
    queue = TurnQueue(1, started, RowsStore())
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
    store = RowsStore()
    queue = TurnQueue(1, Started(store), store)
    a, b, c = StandIn("a"), StandIn("b"), StandIn("c")
    for stand_in, text in ((a, "a1"), (b, "b1"), (c, "c1"), (b, "b2")):
        await queue.submit(as_session(stand_in), None, text)
    assert queue.cancel(as_session(b)) == 2
    assert queue.cancel(as_session(b)) == 0
    assert queue.waiting == 1
    assert list(store.rows.values()) == ["c1"]
    assert b.shown[-1].status_change.message == "cancelled: 2 queued message(s) not sent"
    assert c.queue_statuses()[-1] == "queued: 1 of 1 waiting for a turn slot"


async def test_stored_messages_wait_again_in_order_after_a_restart() -> None:
    store = RowsStore()
    started = Started(store)
    store.rows = {7: "b1", 8: "a2"}  # what the daemon before had stored
    queue = TurnQueue(1, started, store)
    a, b = StandIn("a"), StandIn("b")
    await queue.submit(as_session(a), None, "running before the restart")
    queue.restore([(7, as_session(b), "b1"), (8, as_session(a), "a2")])
    assert b.queue_statuses()[-1] == "queued: 1 of 2 waiting for a turn slot"
    a.end_turn()
    await settle()
    assert started.texts == ["running before the restart", "b1"]
    assert store.rows == {8: "a2"}


async def test_a_stopping_daemon_starts_nothing_queued_and_keeps_it_stored() -> None:
    store = RowsStore()
    started = Started(store)
    queue = TurnQueue(1, started, store)
    a, b = StandIn("a"), StandIn("b")
    await queue.submit(as_session(a), None, "a1")
    await queue.submit(as_session(b), None, "b1")
    queue.close()
    a.end_turn()  # the shutdown stops a's claude: its turn ends
    await settle()
    assert started.texts == ["a1"]
    assert list(store.rows.values()) == ["b1"]


async def test_a_client_gone_while_its_turn_starts_keeps_the_place() -> None:
    starting = asyncio.Event()

    async def slow_start(
        session: Session, client_id: str | None, text: str, queued_id: int | None, key: str
    ) -> bool:
        starting.set()
        await asyncio.sleep(3600)  # claude still starting when the client goes away
        return True

    queue = TurnQueue(1, slow_start, RowsStore())
    a, b = StandIn("a"), StandIn("b")
    request = asyncio.create_task(queue.submit(as_session(a), "client", "a1"))
    await starting.wait()
    request.cancel()  # the client's stream ends: its request is cancelled
    await asyncio.gather(request, return_exceptions=True)
    await queue.submit(as_session(b), None, "b1")
    assert (queue.running, queue.waiting) == (1, 1)  # a's turn still holds the place


async def test_a_queued_message_stays_stored_until_its_start_takes_it() -> None:
    """The queue does not forget a message it hands over: a daemon killed before the start
    recorded it queues it again (the start takes the row with the line it records)."""
    handed: list[int | None] = []
    never = asyncio.Event()

    async def start_cut_short(
        session: Session, client_id: str | None, text: str, queued_id: int | None, key: str
    ) -> bool:
        handed.append(queued_id)
        if text == "b1":
            await never.wait()  # the daemon dies here, before b1's line is recorded
        return True

    store = RowsStore()
    queue = TurnQueue(1, start_cut_short, store)
    a, b = StandIn("a"), StandIn("b")
    await queue.submit(as_session(a), None, "a1")
    await queue.submit(as_session(b), None, "b1")
    a.end_turn()
    await settle()
    assert handed == [None, 100]  # a1 was never queued; b1 is handed over with its row
    assert store.rows == {100: "b1"}
    assert (queue.running, queue.waiting) == (1, 0)


async def test_a_queued_message_whose_start_fails_is_not_queued_again() -> None:
    async def failing_start(
        session: Session, client_id: str | None, text: str, queued_id: int | None, key: str
    ) -> bool:
        if text == "b1":
            raise RuntimeError("the working directory is gone")
        return True

    store = RowsStore()
    queue = TurnQueue(1, failing_start, store)
    a, b = StandIn("a"), StandIn("b")
    await queue.submit(as_session(a), None, "a1")
    await queue.submit(as_session(b), None, "b1")
    a.end_turn()
    await settle()
    assert store.rows == {}
    assert (queue.running, queue.waiting) == (0, 0)
