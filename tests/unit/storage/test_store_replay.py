"""Replay reads: keyset pages off the loop, seeding counters, per-session uniqueness."""

from __future__ import annotations

import sqlite3

import pytest
from store_helpers import NOW, add_session, line_and_events

from betcode.storage import StoreReader, transaction
from betcode.storage.rows import INSERT_EVENT, INSERT_MESSAGE, EventRow, MessageRow


def fill(conn: sqlite3.Connection, session_id: str, lines: int) -> None:
    """`lines` lines with two events each, written straight through a connection."""
    rows = [row for n in range(1, lines + 1) for row in line_and_events(session_id, n, 2 * n - 1)]
    with transaction(conn):
        conn.executemany(INSERT_MESSAGE, [r for r in rows if isinstance(r, MessageRow)])
        conn.executemany(INSERT_EVENT, [r for r in rows if isinstance(r, EventRow)])


async def test_replay_pages_cover_every_event_once_in_order(
    conn: sqlite3.Connection, reader: StoreReader
) -> None:
    add_session(conn, "s1")
    add_session(conn, "s2")
    fill(conn, "s1", 1250)  # 2500 events
    fill(conn, "s2", 10)

    replayed: list[tuple[int, bytes]] = []
    page_sizes: list[int] = []
    after = 0
    while page := await reader.read_events("s1", after):
        page_sizes.append(len(page))
        replayed.extend(page)
        after = page[-1][0]

    assert page_sizes == [1000, 1000, 500]
    assert [seq for seq, _ in replayed] == list(range(1, 2501))
    assert replayed[41] == (42, b"event-42")


async def test_replay_from_the_middle_and_with_a_small_limit(
    conn: sqlite3.Connection, reader: StoreReader
) -> None:
    add_session(conn)
    fill(conn, "s1", 50)

    assert [seq for seq, _ in await reader.read_events("s1", 95)] == [96, 97, 98, 99, 100]
    assert [seq for seq, _ in await reader.read_events("s1", 10, limit=3)] == [11, 12, 13]
    assert await reader.read_events("s1", 100) == []
    assert await reader.read_events("unknown", 0) == []


async def test_read_messages_returns_the_lines_verbatim(
    conn: sqlite3.Connection, reader: StoreReader
) -> None:
    add_session(conn)
    fill(conn, "s1", 3)

    messages = await reader.read_messages("s1", 1)

    assert messages == [
        MessageRow("s1", 2, "out", "assistant", b'{"type":"assistant","n":2}', NOW),
        MessageRow("s1", 3, "out", "assistant", b'{"type":"assistant","n":3}', NOW),
    ]


async def test_max_sequences_seed_both_counters(
    conn: sqlite3.Connection, reader: StoreReader
) -> None:
    add_session(conn, "s1")
    add_session(conn, "empty")
    fill(conn, "s1", 7)

    assert await reader.max_sequences("s1") == (7, 14)
    assert await reader.max_sequences("empty") == (0, 0)


@pytest.mark.parametrize(
    ("statement", "row"),
    [
        (INSERT_MESSAGE, MessageRow("s1", 1, "out", "assistant", b"{}", NOW)),
        (INSERT_EVENT, EventRow("s1", 1, 1, "text_delta", b"x", NOW)),
    ],
)
def test_a_sequence_is_unique_per_session_only(
    conn: sqlite3.Connection, statement: str, row: MessageRow | EventRow
) -> None:
    add_session(conn, "s1")
    add_session(conn, "s2")
    conn.execute(statement, row)
    conn.execute(statement, row._replace(session_id="s2"))

    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        conn.execute(statement, row)


def test_rows_for_an_unknown_session_are_refused(conn: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        conn.execute(INSERT_EVENT, EventRow("ghost", 1, None, "status_change", b"x", NOW))


async def test_reader_connections_cannot_write(reader: StoreReader) -> None:
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        await reader.read(lambda c: c.execute("DELETE FROM sessions"))
