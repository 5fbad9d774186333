"""RequestInputLock on a real session and store: the wait is announced in the session's log
(InputLockRequested PENDING with its deadline) and settled once — by the InputLockChange of
the lock moving, or by InputLockRequested KEPT when the holder sent input in time."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
from session_parts import RecordingGate

from betcode.sessions.fanout import Frame
from betcode.sessions.input_lock import NotAttached
from betcode.sessions.session import Session
from betcode.storage import StoreWriter
from betcode.v1 import agent_pb2

World = tuple[Session, RecordingGate, StoreWriter, Path]
TRANSFER_SECONDS = 0.3
HOUR = 3600.0
WAIT_SECONDS = 60.0  # only a hang guard
PENDING = agent_pb2.INPUT_LOCK_REQUEST_STATE_PENDING
KEPT = agent_pb2.INPUT_LOCK_REQUEST_STATE_KEPT


def attach(session: Session, client_id: str) -> AsyncGenerator[list[Frame], None]:
    return session.attach(client_id, 0, max_count=64, max_bytes=1 << 20)


async def lock_events(writer: StoreWriter, db_path: Path) -> list[tuple[object, ...]]:
    """The stored lock events in order: ("moved", holder) or (state, requester, holder)."""
    await writer.call(lambda _c: None)  # everything emitted so far is committed
    with sqlite3.connect(db_path) as db:
        rows = db.execute(
            "SELECT payload FROM events WHERE kind IN ('input_lock', 'input_lock_requested') "
            "ORDER BY sequence"
        ).fetchall()
    seen: list[tuple[object, ...]] = []
    for (payload,) in rows:
        event = agent_pb2.AgentEvent.FromString(payload)
        if event.HasField("input_lock"):
            seen.append(("moved", event.input_lock.holder_client_id))
        else:
            asked = event.input_lock_requested
            seen.append((asked.state, asked.requested_by_client_id, asked.holder_client_id))
    return seen


async def two_clients(
    session: Session, transfer_seconds: float = TRANSFER_SECONDS
) -> list[AsyncGenerator[list[Frame], None]]:
    session.lock.retime(transfer_seconds, 300)
    streams = [attach(session, "holder"), attach(session, "asker")]
    for stream in streams:
        await asyncio.wait_for(anext(stream), 10)
    assert session.lock.holder == "holder"
    return streams


async def test_an_idle_holder_is_told_then_the_lock_moves(world: World) -> None:
    session, _, writer, db_path = world
    streams = await two_clients(session)
    asked_at = time.time()
    request = asyncio.create_task(session.request_input_lock("asker"))
    await asyncio.sleep(0)  # the wait is announced before it sleeps
    assert await lock_events(writer, db_path) == [
        ("moved", "holder"),
        (PENDING, "asker", "holder"),
    ]
    assert await asyncio.wait_for(request, 10) is True
    assert await lock_events(writer, db_path) == [
        ("moved", "holder"),
        (PENDING, "asker", "holder"),
        ("moved", "asker"),  # the move settles the request: no KEPT
    ]
    with sqlite3.connect(db_path) as db:
        (payload,) = db.execute(
            "SELECT payload FROM events WHERE kind = 'input_lock_requested'"
        ).fetchone()
    deadline = agent_pb2.AgentEvent.FromString(payload).input_lock_requested.request_deadline
    assert abs(deadline.ToNanoseconds() / 1e9 - (asked_at + TRANSFER_SECONDS)) < 1.0
    for stream in streams:
        await stream.aclose()


async def test_a_holder_who_sends_input_keeps_the_lock_and_that_is_announced_at_once(
    world: World,
) -> None:
    session, _, writer, db_path = world
    streams = await two_clients(session, transfer_seconds=HOUR)
    request = asyncio.create_task(session.request_input_lock("asker"))
    await asyncio.sleep(0.01)
    session.lock.check_input("holder")  # what a message or an answer from the holder does
    # Settled by the answer, not by the deadline an hour away.
    assert await asyncio.wait_for(request, WAIT_SECONDS) is False
    assert session.lock.holder == "holder"
    assert await lock_events(writer, db_path) == [
        ("moved", "holder"),
        (PENDING, "asker", "holder"),
        (KEPT, "asker", "holder"),
    ]
    for stream in streams:
        await stream.aclose()


async def test_a_holder_leaving_during_the_wait_settles_it_with_the_move(world: World) -> None:
    session, _, writer, db_path = world
    holder, asker = await two_clients(session, transfer_seconds=HOUR)
    request = asyncio.create_task(session.request_input_lock("asker"))
    await asyncio.sleep(0)
    await holder.aclose()  # the lock passes to the first waiter: the asker
    assert await asyncio.wait_for(request, WAIT_SECONDS) is True
    assert await lock_events(writer, db_path) == [
        ("moved", "holder"),
        (PENDING, "asker", "holder"),
        ("moved", "asker"),
    ]
    await asker.aclose()


async def test_a_free_lock_is_granted_without_announcing_a_wait(world: World) -> None:
    session, _, writer, db_path = world
    stream = attach(session, "only")
    await asyncio.wait_for(anext(stream), 10)
    assert await session.request_input_lock("only") is True
    assert await lock_events(writer, db_path) == [("moved", "only")]
    await stream.aclose()


async def test_a_requester_gone_before_the_answer_settles_its_request_at_once(
    world: World,
) -> None:
    session, _, writer, db_path = world
    holder, asker = await two_clients(session, transfer_seconds=HOUR)
    request = asyncio.create_task(session.request_input_lock("asker"))
    await asyncio.sleep(0)  # announced: it waits for the holder
    # The requester disconnects: its stream ends and gRPC cancels its RequestInputLock call.
    await asker.aclose()
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert session.lock.holder == "holder"
    assert await lock_events(writer, db_path) == [
        ("moved", "holder"),
        (PENDING, "asker", "holder"),
        (KEPT, "asker", "holder"),  # settled now, not an hour later
    ]
    await holder.aclose()


async def test_a_request_cancelled_after_the_lock_moved_is_not_settled_twice(
    world: World,
) -> None:
    session, _, writer, db_path = world
    holder, asker = await two_clients(session, transfer_seconds=HOUR)
    request = asyncio.create_task(session.request_input_lock("asker"))
    await asyncio.sleep(0)
    await holder.aclose()  # the lock moves to the asker: that settles the request
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)
    assert await lock_events(writer, db_path) == [
        ("moved", "holder"),
        (PENDING, "asker", "holder"),
        ("moved", "asker"),
    ]
    await asker.aclose()


async def test_a_requester_whose_stream_closed_is_not_given_the_lock_at_the_deadline(
    world: World,
) -> None:
    session, _, writer, db_path = world
    holder, asker = await two_clients(session)
    request = asyncio.create_task(session.request_input_lock("asker"))
    await asyncio.sleep(0)
    await asker.aclose()  # its Converse stream ends; its RequestInputLock call goes on
    assert await asyncio.wait_for(request, WAIT_SECONDS) is False
    assert session.lock.holder == "holder"
    assert await lock_events(writer, db_path) == [
        ("moved", "holder"),
        (PENDING, "asker", "holder"),
        (KEPT, "asker", "holder"),
    ]
    session.lock.check_input("holder")  # and it still takes the holder's input
    await holder.aclose()


@pytest.mark.parametrize("others", [[], ["holder"]], ids=["nobody attached", "a holder"])
async def test_a_client_without_a_stream_is_refused_and_nothing_changes(
    world: World, others: list[str]
) -> None:
    session, _, writer, db_path = world
    streams = [attach(session, client) for client in others]
    for stream in streams:
        await asyncio.wait_for(anext(stream), 10)
    with pytest.raises(NotAttached, match="attach to the session with Converse"):
        await asyncio.wait_for(session.request_input_lock("stranger"), WAIT_SECONDS)
    assert (session.lock.holder, session.lock.waiters) == (others[0] if others else None, [])
    assert await lock_events(writer, db_path) == [("moved", client) for client in others]
    for stream in streams:
        await stream.aclose()


async def test_a_withdrawn_request_is_not_handed_the_lock_by_the_idle_rule(world: World) -> None:
    session, _, writer, db_path = world
    holder, asker = await two_clients(session, transfer_seconds=HOUR)
    request = asyncio.create_task(session.request_input_lock("asker"))
    await asyncio.sleep(0)
    request.cancel()  # the requester gave up; its stream stays open
    await asyncio.gather(request, return_exceptions=True)
    session.lock.retime(HOUR, 0.0)  # the holder is idle for long enough from now on
    assert session.lock.idle_handover() is False
    assert (session.lock.holder, session.lock.waiters) == ("holder", [])
    assert await lock_events(writer, db_path) == [
        ("moved", "holder"),
        (PENDING, "asker", "holder"),
        (KEPT, "asker", "holder"),
    ]
    for stream in (holder, asker):
        await stream.aclose()


async def test_the_holder_asking_for_its_own_lock_answers_a_waiting_request(
    world: World,
) -> None:
    session, _, writer, db_path = world
    streams = await two_clients(session, transfer_seconds=HOUR)
    request = asyncio.create_task(session.request_input_lock("asker"))
    await asyncio.sleep(0)
    assert await session.request_input_lock("holder") is True
    assert await asyncio.wait_for(request, WAIT_SECONDS) is False  # not an hour later
    assert await lock_events(writer, db_path) == [
        ("moved", "holder"),
        (PENDING, "asker", "holder"),
        (KEPT, "asker", "holder"),
    ]
    for stream in streams:
        await stream.aclose()


async def test_a_holder_with_a_second_stream_keeps_the_lock_when_one_closes(world: World) -> None:
    session, _, _, _ = world
    first, asker = await two_clients(session)
    second = attach(session, "holder")  # the same client again (a reconnect racing the old one)
    await asyncio.wait_for(anext(second), 10)
    await first.aclose()
    assert session.lock.holder == "holder"
    assert await session.request_input_lock("holder") is True
    await second.aclose()
    assert session.lock.holder == "asker"
    await asker.aclose()
