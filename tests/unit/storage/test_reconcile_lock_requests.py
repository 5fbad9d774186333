"""Startup reconciliation: nobody holds an input lock after a restart, so a log that gave the
lock to a client, or that has RequestInputLock waits left open, gets the restart's
InputLockChange (nobody holds the lock), once, and a replay shows it."""

from __future__ import annotations

import sqlite3

from store_helpers import NOW, add_session

from betcode.storage import StoreReader, reconcile
from betcode.storage.reconcile import INTERRUPTED_CODE
from betcode.storage.rows import INSERT_EVENT
from betcode.storage.sessions import update_status
from betcode.v1 import agent_pb2

LATER = NOW + 3600
PENDING = agent_pb2.INPUT_LOCK_REQUEST_STATE_PENDING
KEPT = agent_pb2.INPUT_LOCK_REQUEST_STATE_KEPT


def moved(holder: str) -> agent_pb2.AgentEvent:
    return agent_pb2.AgentEvent(input_lock=agent_pb2.InputLockChange(holder_client_id=holder))


def asked(
    requester: str, holder: str, deadline: float, state: int = PENDING
) -> agent_pb2.AgentEvent:
    event = agent_pb2.AgentEvent(
        input_lock_requested=agent_pb2.InputLockRequested(
            requested_by_client_id=requester,
            holder_client_id=holder,
            state=state,  # type: ignore[arg-type]
        )
    )
    event.input_lock_requested.request_deadline.FromNanoseconds(int(deadline * 1e9))
    return event


def text(value: str) -> agent_pb2.AgentEvent:
    return agent_pb2.AgentEvent(text_delta=agent_pb2.TextDelta(text=value))


def write_log(conn: sqlite3.Connection, session_id: str, *events: agent_pb2.AgentEvent) -> None:
    """The session's log as the live daemon stored it: events under seqs 1, 2, ..."""
    add_session(conn, session_id)
    for sequence, event in enumerate(events, start=1):
        event.sequence = sequence
        kind = event.WhichOneof("event")
        conn.execute(
            INSERT_EVENT, (session_id, sequence, None, kind, event.SerializeToString(), NOW)
        )


def log_of(conn: sqlite3.Connection, session_id: str) -> list[agent_pb2.AgentEvent]:
    rows = conn.execute(
        "SELECT payload FROM events WHERE session_id = ? ORDER BY sequence", (session_id,)
    )
    return [agent_pb2.AgentEvent.FromString(payload) for (payload,) in rows]


def test_a_request_left_waiting_is_settled_by_the_restarts_release(
    conn: sqlite3.Connection,
) -> None:
    write_log(conn, "s", moved("holder"), text("hi"), asked("asker", "holder", NOW + 30))

    report = reconcile(conn, LATER)

    assert report.lock_requests_settled == 1
    *_, release = log_of(conn, "s")
    assert release.WhichOneof("event") == "input_lock"
    assert release.input_lock.holder_client_id == ""  # nobody holds the lock after a restart
    assert (release.sequence, release.timestamp.seconds) == (4, int(LATER))
    (kind, source) = conn.execute(
        "SELECT kind, message_sequence FROM events WHERE session_id = 's' AND sequence = 4"
    ).fetchone()
    assert (kind, source) == ("input_lock", None)  # a daemon event, found by its kind


def test_settled_requests_get_nothing_and_a_second_restart_adds_nothing(
    conn: sqlite3.Connection,
) -> None:
    write_log(conn, "kept", moved("h"), asked("a", "h", NOW + 30), asked("a", "h", NOW + 30, KEPT))
    write_log(conn, "moved", moved("h"), asked("a", "h", NOW + 30), moved("a"))
    write_log(conn, "never", text("no lock events at all"))
    # Two asked, one kept: the other (same requester, a later deadline) still waits.
    write_log(
        conn,
        "one-of-two",
        moved("h"),
        asked("a", "h", NOW + 30),
        asked("a", "h", NOW + 30, KEPT),
        asked("a", "h", NOW + 60),
        asked("b", "h", NOW + 61),
    )

    assert reconcile(conn, LATER).lock_requests_settled == 2  # both of "one-of-two"
    assert reconcile(conn, LATER + 1).lock_requests_settled == 0

    # "kept" and "moved" had nothing waiting, but their logs gave the lock to a client: they
    # get the release too (nobody holds it now); a second restart adds nothing anywhere.
    for released, length in (("kept", 4), ("moved", 4), ("one-of-two", 6)):
        ending = log_of(conn, released)
        assert len(ending) == length
        assert ending[-1].input_lock == agent_pb2.InputLockChange()
    assert len(log_of(conn, "never")) == 1


def test_a_log_that_last_gave_the_lock_away_ends_with_nobody_holding_it(
    conn: sqlite3.Connection,
) -> None:
    write_log(conn, "held", moved("alice"), text("hi"))
    write_log(conn, "released", moved("alice"), moved(""), text("bye"))

    assert reconcile(conn, LATER).lock_requests_settled == 0

    *_, release = log_of(conn, "held")
    assert (release.sequence, release.input_lock.holder_client_id) == (3, "")
    assert len(log_of(conn, "released")) == 3  # already says nobody holds it


async def test_a_replay_after_the_restart_ends_with_the_turn_and_the_wait_settled(
    conn: sqlite3.Connection, reader: StoreReader
) -> None:
    """A session killed mid-turn while a client asked for its lock: both endings appended,
    contiguous after what was stored, and replayed as stored."""
    write_log(conn, "busy", moved("holder"), text("working"), asked("asker", "holder", NOW + 30))
    update_status(conn, "busy", "active", NOW)

    reconcile(conn, LATER)

    replayed = await reader.read_events("busy", 3)
    assert [seq for seq, _ in replayed] == [4, 5, 6]
    error, idle, release = (agent_pb2.AgentEvent.FromString(data) for _, data in replayed)
    assert error.error.code == INTERRUPTED_CODE
    assert idle.WhichOneof("event") == "status_change"
    assert release.input_lock.holder_client_id == ""
    assert [event.sequence for event in (error, idle, release)] == [4, 5, 6]
