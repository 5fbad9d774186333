"""Session.attach and the input lock on a real store: a stream takes the lock only once it runs
and gives it back however it ends (closed, cancelled, or dropped before it ever started), and
every move of the lock is shown to the clients and mirrored in SQLite."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator
from pathlib import Path

from session_parts import RecordingGate

from betcode.sessions.fanout import Frame
from betcode.sessions.session import Session
from betcode.storage import StoreWriter
from betcode.v1 import agent_pb2

World = tuple[Session, RecordingGate, StoreWriter, Path]


def attach(session: Session, client_id: str) -> AsyncGenerator[list[Frame], None]:
    return session.attach(client_id, 0, max_count=64, max_bytes=1 << 20)


async def lock_holders_shown(writer: StoreWriter, db_path: Path) -> list[str]:
    """The holders announced so far (InputLock events, from the stored log)."""
    await writer.call(lambda _c: None)  # everything emitted so far is committed
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT payload FROM events WHERE kind = 'input_lock' ORDER BY sequence")
        return [agent_pb2.AgentEvent.FromString(p).input_lock.holder_client_id for (p,) in rows]


def stored_holder(db_path: Path) -> str | None:
    with sqlite3.connect(db_path) as db:
        (holder,) = db.execute("SELECT input_lock_client FROM sessions WHERE id = 's1'").fetchone()
    return holder  # type: ignore[no-any-return]


async def test_a_stream_cancelled_before_it_started_holds_nothing(world: World) -> None:
    session, _, writer, db_path = world
    # A Converse whose client went away between attach() and the first read of its stream.
    stream = attach(session, "gone")
    never_ran = asyncio.create_task(anext(stream))
    never_ran.cancel()
    await asyncio.gather(never_ran, return_exceptions=True)
    assert (session.lock.holder, session.lock.attached, len(session.hub)) == (None, [], 0)
    await stream.aclose()

    other = attach(session, "other")
    batch = await asyncio.wait_for(anext(other), 10)
    assert session.lock.holder == "other"
    assert [agent_pb2.AgentEvent.FromString(data).input_lock.holder_client_id for _, data in batch]
    assert await lock_holders_shown(writer, db_path) == ["other"]
    await other.aclose()


async def test_a_stream_cancelled_mid_read_passes_the_lock_on(world: World) -> None:
    session, _, writer, db_path = world
    first, second = attach(session, "first"), attach(session, "second")
    await asyncio.wait_for(anext(first), 10)
    await asyncio.wait_for(anext(second), 10)
    assert (session.lock.holder, len(session.hub)) == ("first", 2)
    assert await lock_holders_shown(writer, db_path) == ["first"]
    assert stored_holder(db_path) == "first"

    waiting = asyncio.create_task(anext(first))
    await asyncio.sleep(0.05)  # parked on the live queue
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)

    assert (session.lock.holder, session.lock.attached, len(session.hub)) == (
        "second",
        ["second"],
        1,
    )
    assert await lock_holders_shown(writer, db_path) == ["first", "second"]
    assert stored_holder(db_path) == "second"
    await second.aclose()
    assert await lock_holders_shown(writer, db_path) == ["first", "second", ""]
    assert stored_holder(db_path) is None
