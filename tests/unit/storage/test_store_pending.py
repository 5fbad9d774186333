"""Durable permission requests: first answer wins, TTL extension, reminders, expiry."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from functools import partial

from store_helpers import NOW, add_session

from betcode.storage import Database, StoreWriter, transaction
from betcode.storage.pending import (
    Reminder,
    answer,
    due_reminders,
    expired,
    extend_ttl,
    get_pending,
    insert_pending,
    list_unanswered,
    list_undelivered,
    mark_delivered,
    mark_forwarded,
    mark_reminder_sent,
)

HOUR = 3600.0
DAY = 86_400.0


def request(
    conn: sqlite3.Connection,
    request_id: str,
    *,
    session_id: str = "s1",
    received_at: float = NOW,
    ttl: float = 7 * DAY,
) -> bool:
    return insert_pending(
        conn,
        request_id=request_id,
        session_id=session_id,
        tool_name="Bash",
        input_json='{"command": "ls"}',
        dialect="stdio",
        received_at=received_at,
        expires_at=received_at + ttl,
        tool_use_id=f"toolu_{request_id}",
    )


def ids(requests: list) -> list[str]:  # type: ignore[type-arg]
    return [r.request_id for r in requests]


def test_a_request_is_stored_once_with_every_column(conn: sqlite3.Connection) -> None:
    add_session(conn)
    assert request(conn, "r1")
    assert not request(conn, "r1", received_at=NOW + 5)  # a re-sent request keeps the first

    stored = get_pending(conn, "r1")
    assert stored is not None
    assert (stored.tool_name, stored.input, stored.tool_use_id, stored.dialect) == (
        "Bash",
        '{"command": "ls"}',
        "toolu_r1",
        "stdio",
    )
    assert (stored.received_at, stored.expires_at, stored.extension_count) == (
        NOW,
        NOW + 7 * DAY,
        0,
    )
    assert stored.is_question is False
    assert (stored.response_received, stored.delivered, stored.reminder_1h_sent) == (
        False,
        False,
        False,
    )
    assert get_pending(conn, "r2") is None


def test_answer_is_a_compare_and_swap(conn: sqlite3.Connection) -> None:
    add_session(conn)
    request(conn, "r1")

    assert answer(conn, "r1", decision="allow_once", payload='{"behavior":"allow"}', now=NOW + 1)
    assert not answer(conn, "r1", decision="deny", payload='{"behavior":"deny"}', now=NOW + 2)
    assert not answer(conn, "unknown", decision="deny", payload="{}", now=NOW + 2)

    stored = get_pending(conn, "r1")
    assert stored is not None
    assert (stored.response_decision, stored.response_payload, stored.response_at) == (
        "allow_once",
        '{"behavior":"allow"}',
        NOW + 1,
    )


async def test_racing_answers_through_the_writer_have_one_winner(
    writer: StoreWriter, conn: sqlite3.Connection
) -> None:
    add_session(conn)
    request(conn, "r1")

    results = await asyncio.gather(
        *(
            writer.call(
                partial(answer, request_id="r1", decision=f"d{n}", payload="{}", now=NOW + n)
            )
            for n in range(20)
        )
    )

    assert results.count(True) == 1
    stored = get_pending(conn, "r1")
    assert stored is not None
    assert stored.response_decision == f"d{results.index(True)}"


def test_racing_answers_on_separate_connections_have_one_winner(database: Database) -> None:
    setup = database.connect()
    add_session(setup)
    request(setup, "r1")
    start = threading.Barrier(4)
    results: list[bool] = []

    def answer_from_own_connection(n: int) -> None:
        conn = database.connect()
        start.wait()
        with transaction(conn):
            results.append(answer(conn, "r1", decision=f"d{n}", payload="{}", now=NOW))
        conn.close()

    threads = [threading.Thread(target=answer_from_own_connection, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == [False, False, False, True]
    setup.close()


def test_forwarding_and_delivery_are_tracked(conn: sqlite3.Connection) -> None:
    add_session(conn)
    request(conn, "r1")
    request(conn, "r2", received_at=NOW + 1)

    assert mark_forwarded(conn, "r1", NOW + 10)
    assert mark_forwarded(conn, "r1", NOW + 20)
    assert not mark_delivered(conn, "r1")  # nothing to deliver before an answer
    answer(conn, "r1", decision="deny", payload="{}", now=NOW + 30)
    answer(conn, "r2", decision="deny", payload="{}", now=NOW + 30)
    assert ids(list_undelivered(conn, "s1")) == ["r1", "r2"]
    assert mark_delivered(conn, "r1")

    stored = get_pending(conn, "r1")
    assert stored is not None
    assert stored.forwarded_at == NOW + 10  # the first time a client saw it is kept
    assert stored.delivered
    assert ids(list_undelivered(conn)) == ["r2"]


def test_unanswered_requests_are_listed_in_arrival_order(conn: sqlite3.Connection) -> None:
    add_session(conn, "s1")
    add_session(conn, "s2")
    request(conn, "late", received_at=NOW + 5)
    request(conn, "early", received_at=NOW)
    request(conn, "other", session_id="s2", received_at=NOW + 1)
    request(conn, "done", received_at=NOW + 2)
    answer(conn, "done", decision="deny", payload="{}", now=NOW + 3)

    assert ids(list_unanswered(conn, "s1")) == ["early", "late"]
    assert ids(list_unanswered(conn)) == ["early", "other", "late"]


def test_ttl_extension_touches_only_live_requests_of_the_session(conn: sqlite3.Connection) -> None:
    add_session(conn, "s1")
    add_session(conn, "s2")
    request(conn, "live", ttl=DAY)
    request(conn, "lapsed", ttl=HOUR)
    request(conn, "answered", ttl=DAY)
    request(conn, "elsewhere", session_id="s2", ttl=DAY)
    answer(conn, "answered", decision="deny", payload="{}", now=NOW)
    now = NOW + 2 * HOUR

    assert extend_ttl(conn, "s1", now, 7 * DAY) == 1
    assert extend_ttl(conn, "s1", now + 1, 7 * DAY) == 1

    live = get_pending(conn, "live")
    assert live is not None
    assert (live.expires_at, live.last_extended_at, live.extension_count) == (
        now + 1 + 7 * DAY,
        now + 1,
        2,
    )
    for untouched, expires in (("lapsed", NOW + HOUR), ("answered", NOW + DAY)):
        row = get_pending(conn, untouched)
        assert row is not None
        assert (row.expires_at, row.extension_count) == (expires, 0)
    assert ids(expired(conn, now)) == ["lapsed"]


def test_reminders_are_due_once_per_tier(conn: sqlite3.Connection) -> None:
    add_session(conn)
    request(conn, "old", received_at=NOW - 2 * DAY)
    request(conn, "hours", received_at=NOW - 2 * HOUR)
    request(conn, "fresh", received_at=NOW - 60)
    request(conn, "answered", received_at=NOW - 2 * DAY)
    answer(conn, "answered", decision="deny", payload="{}", now=NOW)

    assert ids(due_reminders(conn, Reminder.ONE_HOUR, NOW)) == ["old", "hours"]
    assert ids(due_reminders(conn, Reminder.ONE_DAY, NOW)) == ["old"]

    assert mark_reminder_sent(conn, "old", Reminder.ONE_HOUR)
    assert mark_reminder_sent(conn, "hours", Reminder.ONE_HOUR)
    assert due_reminders(conn, Reminder.ONE_HOUR, NOW) == []
    assert ids(due_reminders(conn, Reminder.ONE_DAY, NOW)) == ["old"]
    mark_reminder_sent(conn, "old", Reminder.ONE_DAY)
    assert due_reminders(conn, Reminder.ONE_DAY, NOW) == []


def test_expired_lists_unanswered_requests_past_their_expiry(conn: sqlite3.Connection) -> None:
    add_session(conn)
    request(conn, "gone", ttl=60)
    request(conn, "edge", ttl=120)
    request(conn, "waiting", ttl=DAY)

    assert ids(expired(conn, NOW + 120)) == ["gone", "edge"]
    assert answer(conn, "gone", decision="expired", payload="{}", now=NOW + 120)
    assert ids(expired(conn, NOW + 120)) == ["edge"]


def test_claudes_suggestions_are_stored_with_the_request(conn: sqlite3.Connection) -> None:
    add_session(conn)
    suggestions = '[{"type":"setMode","mode":"acceptEdits","destination":"session"}]'
    insert_pending(
        conn,
        request_id="r1",
        session_id="s1",
        tool_name="Edit",
        input_json="{}",
        dialect="stdio",
        received_at=NOW,
        expires_at=NOW + HOUR,
        permission_suggestions=suggestions,
    )
    request(conn, "r2")
    stored = [get_pending(conn, request_id) for request_id in ("r1", "r2")]
    assert [row.permission_suggestions if row else None for row in stored] == [suggestions, "[]"]
