"""The single writer: ordering, group commit, callbacks on the loop, failures, close."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pytest
from harness.conditions import until
from store_helpers import NOW, add_session, line_and_events

from betcode.storage import Database, EventRow, MessageRow, StoreClosed, StoreWriter
from betcode.storage import queued as queued_rows
from betcode.storage import writer as writer_module
from betcode.storage.checkpointer import WalCheckpointer
from betcode.storage.idempotency import key_recorded
from betcode.storage.rows import IdempotencyKeyRow, QueuedMessageTakenRow


class Gate:
    """Holds the writer thread inside a `call` so that appends pile up into one batch."""

    def __init__(self, writer: StoreWriter) -> None:
        self._entered = threading.Event()
        self._release = threading.Event()
        self._task = asyncio.ensure_future(writer.call(self._hold))

    def _hold(self, _conn: sqlite3.Connection) -> None:
        self._entered.set()
        self._release.wait(10)

    async def closed(self) -> None:
        await asyncio.to_thread(self._entered.wait, 10)

    async def open(self) -> None:
        self._release.set()
        await self._task


def seqs(conn: sqlite3.Connection, table: str, session_id: str = "s1") -> list[int]:
    rows = conn.execute(
        f"SELECT sequence FROM {table} WHERE session_id = ? ORDER BY sequence", (session_id,)
    )
    return [seq for (seq,) in rows]


async def flush(writer: StoreWriter) -> None:
    """Everything queued before this is committed and its callbacks have run."""
    await writer.call(lambda _conn: None)


async def test_many_appends_commit_in_order_in_few_transactions(
    writer: StoreWriter, conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_session(conn)
    loop = asyncio.get_running_loop()
    handoffs: list[Any] = []
    original = loop.call_soon_threadsafe

    def counting(callback: Callable[..., Any], *args: Any) -> Any:
        handoffs.append(callback)
        return original(callback, *args)

    gate = Gate(writer)
    await gate.closed()
    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    before = writer.health().batches_committed
    committed: list[tuple[int, bool, int]] = []
    for line in range(1, 1001):

        def note(ok: bool, line: int = line) -> None:
            committed.append((line, ok, threading.get_ident()))

        writer.append(line_and_events("s1", line, 2 * line - 1), note)
    await gate.open()
    await flush(writer)

    transactions = writer.health().batches_committed - before
    assert [line for line, _, _ in committed] == list(range(1, 1001))
    assert all(ok for _, ok, _ in committed)
    assert {thread for _, _, thread in committed} == {threading.get_ident()}
    assert 3000 / 258 <= transactions <= 3000 / 256 + 2  # capped at ~256 rows, never 1 per row
    commit_handoffs = len(handoffs) - 2  # the gate's and the flush's results
    assert commit_handoffs == transactions
    assert seqs(conn, "messages") == list(range(1, 1001))
    assert seqs(conn, "events") == list(range(1, 2001))


async def test_a_failed_batch_is_logged_degrades_and_the_next_batch_commits(
    writer: StoreWriter, conn: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    add_session(conn)
    results: list[bool] = []
    writer.append(line_and_events("s1", 1, 1), results.append)
    await flush(writer)
    assert not writer.health().degraded

    writer.append(line_and_events("s1", 1, 3), results.append)  # line seq 1 again: UNIQUE
    await flush(writer)
    health = writer.health()
    assert results == [True, False]
    assert health.degraded
    assert health.failed_writes == 1
    assert health.rows_lost == 3
    assert health.last_error is not None
    assert "UNIQUE" in health.last_error
    assert any(r.levelno == logging.ERROR and "3 rows failed" in r.message for r in caplog.records)

    writer.append(line_and_events("s1", 2, 3), results.append)
    await flush(writer)
    assert results == [True, False, True]
    assert seqs(conn, "messages") == [1, 2]
    assert seqs(conn, "events") == [1, 2, 3, 4]
    assert writer.health().degraded  # sticky: the stored history has a hole


async def test_one_failing_group_does_not_take_its_batch_with_it(
    writer: StoreWriter, conn: sqlite3.Connection
) -> None:
    add_session(conn)
    # Simulates an I/O failure (e.g. a full disk) on one particular insert.
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.kind = 'poison' "
        "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
    )
    poisoned: list[MessageRow | EventRow] = [
        MessageRow("s1", 2, "out", "assistant", b"{}", NOW),
        EventRow("s1", 3, 2, "poison", b"x", NOW),
    ]
    results: dict[str, bool] = {}
    gate = Gate(writer)
    await gate.closed()
    writer.append(line_and_events("s1", 1, 1), lambda ok: results.update(a=ok))
    writer.append(poisoned, lambda ok: results.update(b=ok))
    writer.append(line_and_events("s1", 3, 3), lambda ok: results.update(c=ok))
    await gate.open()
    await flush(writer)

    assert results == {"a": True, "b": False, "c": True}
    assert seqs(conn, "messages") == [1, 3]  # the poisoned line went with its event
    assert seqs(conn, "events") == [1, 2, 3, 4]
    assert writer.health().last_error == "IntegrityError: database or disk is full"


async def test_a_raising_callback_does_not_stop_the_others(
    writer: StoreWriter, conn: sqlite3.Connection
) -> None:
    add_session(conn)
    results: list[int] = []

    def broken(_ok: bool) -> None:
        raise RuntimeError("subscriber bug")

    gate = Gate(writer)
    await gate.closed()
    writer.append(line_and_events("s1", 1, 1), broken)
    writer.append(line_and_events("s1", 2, 3), lambda _ok: results.append(2))
    await gate.open()
    await flush(writer)
    assert results == [2]


async def test_call_returns_its_result_in_order_with_appends(
    writer: StoreWriter, conn: sqlite3.Connection
) -> None:
    add_session(conn)
    writer.append(line_and_events("s1", 1, 1))
    count = await writer.call(lambda c: c.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
    assert count == 1


async def test_a_submitted_call_is_queued_before_it_returns(writer: StoreWriter) -> None:
    # A write nobody waits for must still run before a call made after it (a task wrapping
    # `call` would only queue once the loop ran it, letting the later call overtake it).
    order: list[str] = []
    submitted = writer.submit(lambda _c: order.append("submitted"))
    await writer.call(lambda _c: order.append("called after"))
    assert order == ["submitted", "called after"]
    assert submitted.done()


async def test_a_raising_call_rolls_back_and_raises(
    writer: StoreWriter, conn: sqlite3.Connection
) -> None:
    def insert_then_fail(c: sqlite3.Connection) -> None:
        add_session(c, "doomed")
        raise ValueError("changed my mind")

    with pytest.raises(ValueError, match="changed my mind"):
        await writer.call(insert_then_fail)
    assert conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 0
    assert not writer.health().degraded  # not a storage failure

    with pytest.raises(sqlite3.OperationalError):
        await writer.call(lambda c: c.execute("INSERT INTO no_such_table VALUES (1)"))
    assert writer.health().degraded


async def test_payload_is_stored_verbatim_as_text(
    writer: StoreWriter, conn: sqlite3.Connection
) -> None:
    add_session(conn)
    odd = b'{"type":"assistant","text":"caf\xc3\xa9 \xff not utf-8"}'
    big = b'{"type":"result","blob":"' + b"z" * 2_000_000 + b'"}'
    writer.append([MessageRow("s1", 1, "out", "assistant", odd, NOW)])
    writer.append([MessageRow("s1", 2, "in", "result", big, NOW)])
    await flush(writer)

    stored = conn.execute(
        "SELECT CAST(payload AS BLOB), typeof(payload), direction FROM messages ORDER BY sequence"
    ).fetchall()
    assert stored == [(odd, "text", "out"), (big, "text", "in")]
    assert conn.execute(
        "SELECT json_extract(payload, '$.type') FROM messages WHERE sequence = 2"
    ).fetchone() == ("result",)


async def test_one_large_append_is_stored_whole_in_order_with_every_value(
    writer: StoreWriter, conn: sqlite3.Connection
) -> None:
    # 777 lines + 1554 events: more rows than one multi-row statement takes, in odd sizes.
    add_session(conn)
    rows = [row for line in range(1, 778) for row in line_and_events("s1", line, 2 * line - 1)]
    outcomes: list[bool] = []
    writer.append(rows, outcomes.append)
    await flush(writer)

    assert outcomes == [True]
    messages = conn.execute(
        "SELECT session_id, sequence, direction, message_type, CAST(payload AS BLOB), created_at"
        " FROM messages ORDER BY sequence"
    ).fetchall()
    events = conn.execute(
        "SELECT session_id, sequence, message_sequence, kind, payload, created_at"
        " FROM events ORDER BY sequence"
    ).fetchall()
    assert [MessageRow(*row) for row in messages] == [r for r in rows if type(r) is MessageRow]
    assert [EventRow(*row) for row in events] == [r for r in rows if type(r) is EventRow]


async def test_a_small_batch_is_all_or_nothing_and_leaves_no_trace_in_the_schema(
    writer: StoreWriter, conn: sqlite3.Connection
) -> None:
    """A batch of a few rows is ONE statement through the writer's temporary log_rows view:
    atomic like a transaction, in both tables, and invisible to every other connection."""
    await writer.call(lambda c: add_session(c))
    outcomes: list[bool] = []
    writer.append(line_and_events("s1", 1, 1), outcomes.append)  # line 1 + events 1, 2
    await flush(writer)
    # Line 2 is new, but its second event reuses seq 2: the whole batch must fail.
    clash = [*line_and_events("s1", 2, 3)[:2], EventRow("s1", 2, 2, "text_delta", b"x", NOW)]
    writer.append(clash, outcomes.append)
    await flush(writer)

    assert outcomes == [True, False]
    assert seqs(conn, "messages") == [1]  # line 2 was not stored without its events
    assert seqs(conn, "events") == [1, 2]
    names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    assert "log_rows" not in names
    with pytest.raises(sqlite3.OperationalError, match="no such table: log_rows"):
        conn.execute("SELECT * FROM log_rows")


async def test_the_wal_is_checkpointed_while_the_writer_runs(
    writer: StoreWriter, database: Database
) -> None:
    # SQLite's own auto-checkpoint (inside a COMMIT, at 1000 WAL pages) is off and would not
    # have run yet: 100 small commits write ~400 pages. The writer asks the checkpointer for
    # one every CHECKPOINT_COMMITS commits.
    await writer.call(lambda c: add_session(c))
    # The file's bytes, not its size: new rows may fill pages a migration freed.
    file_before = database.path.read_bytes()
    for line in range(1, 101):
        committed = asyncio.get_running_loop().create_future()
        writer.append(line_and_events("s1", line, 2 * line - 1), committed.set_result)
        assert await committed
    await until(lambda: writer.health().checkpoints >= 1)

    assert database.path.read_bytes() != file_before  # pages were copied out of the WAL


async def test_commits_go_on_while_a_checkpoint_is_under_way(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint (2-3 ms of copying and fsync) never holds up the commits behind it."""
    monkeypatch.setattr(writer_module, "CHECKPOINT_COMMITS", 5)
    release = threading.Event()
    started = threading.Event()

    class StuckCheckpointer(WalCheckpointer):
        def checkpoint(self) -> None:
            started.set()
            release.wait()  # until the test lets go, however long the commits take
            super().checkpoint()

    writer = StoreWriter(database, checkpointer=StuckCheckpointer(database))
    try:
        await writer.call(lambda c: add_session(c))
        for line in range(1, 51):
            if line == 6:  # the 5th commit asked for a checkpoint, which is now stuck
                assert await asyncio.to_thread(started.wait, 30)
            committed = asyncio.get_running_loop().create_future()
            writer.append(line_and_events("s1", line, 2 * line - 1), committed.set_result)
            assert await asyncio.wait_for(committed, 20)  # a hang guard, not a measurement
        assert writer.health().checkpoints == 0  # still stuck
    finally:
        release.set()
        await writer.close()
    conn = database.connect()
    assert seqs(conn, "messages") == list(range(1, 51))
    conn.close()


async def test_close_commits_everything_queued_and_checkpoints(database: Database) -> None:
    writer = StoreWriter(database)
    await writer.call(lambda c: add_session(c))
    results: list[bool] = []
    for line in range(1, 501):
        writer.append(line_and_events("s1", line, 2 * line - 1), results.append)

    await writer.close()

    assert results == [True] * 500
    wal = database.path.with_name(database.path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    conn = database.connect()
    assert seqs(conn, "messages") == list(range(1, 501))
    conn.close()
    with pytest.raises(StoreClosed):
        writer.append(line_and_events("s1", 501, 1001))
    with pytest.raises(StoreClosed):
        await writer.call(lambda _c: None)


@pytest.mark.parametrize("events", [1, writer_module.SINGLE_STATEMENT_ROWS])
async def test_a_queued_message_leaves_the_queue_in_its_line_s_transaction(
    writer: StoreWriter, conn: sqlite3.Connection, events: int
) -> None:
    """Taken with a small batch (one statement through the view) and a big one (table by
    table); a batch that fails takes nothing out."""
    add_session(conn)
    queued = [queued_rows.add(conn, "s1", text, NOW) for text in ("first", "second", "third")]
    conn.commit()
    rows = [
        *line_and_events("s1", 1, 1, events=events),
        QueuedMessageTakenRow("s1", queued[0], NOW),
    ]
    writer.append(rows)
    await flush(writer)
    assert [text for _, _, text in queued_rows.in_order(conn)] == ["second", "third"]

    clash = [*line_and_events("s1", 1, 100), QueuedMessageTakenRow("s1", queued[1], NOW)]
    writer.append(clash)  # line 1 again: the insert fails, the whole batch with it
    await flush(writer)
    assert [text for _, _, text in queued_rows.in_order(conn)] == ["second", "third"]


@pytest.mark.parametrize("events", [1, writer_module.SINGLE_STATEMENT_ROWS])
async def test_an_idempotency_key_is_recorded_in_its_line_s_transaction(
    writer: StoreWriter, conn: sqlite3.Connection, events: int
) -> None:
    """Small batch and big one alike; a batch that fails records no key, so the message it
    held is applied when it comes again."""
    add_session(conn)
    writer.append([*line_and_events("s1", 1, 1, events=events), IdempotencyKeyRow("s1", "k1", NOW)])
    await flush(writer)
    assert key_recorded(conn, "k1", NOW)

    clash = [*line_and_events("s1", 1, 100, events=events), IdempotencyKeyRow("s1", "k2", NOW)]
    writer.append(clash)  # line 1 again: the insert fails, the whole batch with it
    await flush(writer)
    assert not key_recorded(conn, "k2", NOW)
