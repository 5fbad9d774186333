"""The single writer: one thread owns the only write connection and group-commits the log.

The event loop never touches SQLite. `append` only enqueues; the thread drains whatever is
queued (up to a row and a byte cap) into ONE transaction without lingering, then makes ONE
`call_soon_threadsafe` per batch that runs every callback of the batch on the loop. Any other
write goes through `call`, on the same thread and in submission order. WAL checkpoints run on
a thread of their own (storage/checkpointer.py), never inside a commit nor ahead of one.

A failed write never stops the stream: it is logged, counted and marks the writer degraded,
and the callbacks still run (with ok=False) so the frames are published anyway.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from betcode.observability.hooks import observer
from betcode.storage.checkpointer import WalCheckpointer
from betcode.storage.database import Database, transaction
from betcode.storage.errors import StoreClosed
from betcode.storage.rows import (
    DELETE_QUEUED_MESSAGE,
    INSERT_EVENT,
    INSERT_IDEMPOTENCY_KEY,
    INSERT_MESSAGE,
    ON_HOLDER_POSITION_CONFLICT,
    UPSERT_HOLDER_POSITION,
    EventRow,
    HolderPositionRow,
    IdempotencyKeyRow,
    LogRow,
    MessageRow,
    QueuedMessageTakenRow,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
OnCommitted = Callable[[bool], None]

MAX_BATCH_ROWS = 256
MAX_BATCH_BYTES = 4 * 1024 * 1024
# A WAL checkpoint is asked for after this many commits or payload bytes: small and frequent
# keeps each one short and the WAL file small.
CHECKPOINT_COMMITS = 64
CHECKPOINT_BYTES = 1024 * 1024
MAX_ROWS_PER_STATEMENT = 256  # x 6 columns: far below SQLite's 32,766 bound parameters
# A batch of up to this many rows (a few lines at a time: the latency-sensitive case) is written
# by ONE statement into log_rows, exact-sized; bigger ones table by table in a transaction.
SINGLE_STATEMENT_ROWS = 32

# Lines, events and holder positions go into one temporary view whose trigger routes each row
# to its table (row_kind: 1 line, 0 event, 2 holder position, 3 a queued message taken, 4 an
# idempotency key), so a small batch is one INSERT: one implicit transaction (atomic, as a
# statement is), and one trip into SQLite instead of four (BEGIN, two INSERTs, COMMIT). Every
# trip gives the GIL away and must win it back from a busy event loop, which made commits
# slow exactly when clients were being served. The view and trigger live in the writer
# connection's TEMP schema only.
_LOG_ROWS_SCHEMA = f"""
CREATE TEMP VIEW log_rows (
    row_kind, session_id, sequence, direction_or_source, type_or_kind, payload, created_at
) AS SELECT 0, '', 0, NULL, '', NULL, 0 WHERE 0;
CREATE TEMP TRIGGER log_rows_insert INSTEAD OF INSERT ON log_rows
BEGIN
    INSERT INTO messages (session_id, sequence, direction, message_type, payload, created_at)
        SELECT NEW.session_id, NEW.sequence, NEW.direction_or_source, NEW.type_or_kind,
               CAST(NEW.payload AS TEXT), NEW.created_at
        WHERE NEW.row_kind = 1;
    INSERT INTO events (session_id, sequence, message_sequence, kind, payload, created_at)
        SELECT NEW.session_id, NEW.sequence, NEW.direction_or_source, NEW.type_or_kind,
               NEW.payload, NEW.created_at
        WHERE NEW.row_kind = 0;
    INSERT INTO holder_positions (session_id, holder_id, stdout_offset, updated_at)
        SELECT NEW.session_id, NEW.type_or_kind, NEW.sequence, NEW.created_at
        WHERE NEW.row_kind = 2{ON_HOLDER_POSITION_CONFLICT};
    DELETE FROM queued_messages WHERE id = NEW.sequence AND NEW.row_kind = 3;
    INSERT INTO processed_idempotency_keys (key, session_id, processed_at)
        SELECT NEW.type_or_kind, NEW.session_id, NEW.created_at
        WHERE NEW.row_kind = 4 ON CONFLICT (key) DO NOTHING;
END;
"""
_INSERT_LOG_ROW = (
    "INSERT INTO log_rows (row_kind, session_id, sequence, direction_or_source, type_or_kind,"
    " payload, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


@dataclass(frozen=True, slots=True)
class WriterHealth:
    """A snapshot for health reporting.

    `degraded` is sticky: once a write has failed, the stored log has a hole, and restarting
    the daemon is what clears it.
    """

    degraded: bool
    last_error: str | None
    failed_writes: int
    rows_lost: int
    batches_committed: int
    rows_committed: int
    checkpoints: int
    # time.monotonic() of the last successful commit (None before the first one), and how
    # many items wait for the thread now: together they tell a stuck writer from an idle one.
    last_commit_at: float | None = None
    queue_depth: int = 0


@dataclass(slots=True)
class _Append:
    rows: Sequence[LogRow]
    on_committed: OnCommitted | None
    size: int


@dataclass(slots=True)
class _Call(Generic[T]):
    fn: Callable[[sqlite3.Connection], T]
    future: asyncio.Future[T]


@dataclass(slots=True)
class _Stop:
    done: asyncio.Future[None]


_Item = _Append | _Call[Any] | _Stop


class StoreWriter:
    """Owns the write connection and its thread; create it on the event loop it reports to."""

    def __init__(
        self,
        database: Database,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        max_batch_rows: int = MAX_BATCH_ROWS,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        checkpointer: WalCheckpointer | None = None,
    ) -> None:
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._max_rows = max_batch_rows
        self._max_bytes = max_batch_bytes
        self._conn = database.connect()
        self._conn.execute("PRAGMA wal_autocheckpoint = 0")  # never inside a COMMIT
        self._conn.executescript(_LOG_ROWS_SCHEMA)
        self._checkpointer = checkpointer if checkpointer is not None else WalCheckpointer(database)
        self._commits_since_checkpoint = 0
        self._bytes_since_checkpoint = 0
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._closed = False
        self._degraded = False
        self._last_error: str | None = None
        self._failed_writes = 0
        self._rows_lost = 0
        self._batches_committed = 0
        self._rows_committed = 0
        self._last_commit_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="betcode-store-writer", daemon=True)
        self._thread.start()

    # ---- called from the event loop (append is safe from any thread) ----

    def append(self, rows: Sequence[LogRow], on_committed: OnCommitted | None = None) -> None:
        """Queue rows to be committed together; never blocks.

        `on_committed(ok)` runs on the loop once the rows' batch is committed (ok=True) or has
        failed (ok=False). The rows of one call always land in the same transaction.
        """
        if self._closed:
            raise StoreClosed("the store writer is closed; no more rows can be written")
        size = 0
        for row in rows:
            size += len(row.payload)
        self._queue.put(_Append(rows, on_committed, size))

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(conn)` in its own transaction on the writer thread, after everything queued."""
        return await self.submit(fn)

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """`call` for a caller that does not wait: queued now, so it is ordered behind what is
        already queued and before anything queued after this returns (a task wrapping `call`
        would queue only when it first runs)."""
        if self._closed:
            raise StoreClosed("the store writer is closed; no more writes can be made")
        future: asyncio.Future[T] = self._loop.create_future()
        self._queue.put(_Call(fn, future))
        return future

    async def close(self) -> None:
        """Commit everything queued, checkpoint the WAL, close the connection, stop the thread."""
        if self._closed:
            return
        self._closed = True
        done: asyncio.Future[None] = self._loop.create_future()
        self._queue.put(_Stop(done))
        await done
        await asyncio.to_thread(self._thread.join)

    def health(self) -> WriterHealth:
        return WriterHealth(
            degraded=self._degraded,
            last_error=self._last_error,
            failed_writes=self._failed_writes,
            rows_lost=self._rows_lost,
            batches_committed=self._batches_committed,
            rows_committed=self._rows_committed,
            checkpoints=self._checkpointer.completed,
            last_commit_at=self._last_commit_at,
            queue_depth=self.queue_depth(),
        )

    def queue_depth(self) -> int:
        """Appends and calls waiting for the writer thread (approximate, from any thread)."""
        return self._queue.qsize()

    # ---- the writer thread ----

    def _run(self) -> None:
        carried: _Item | None = None
        while True:
            item = carried if carried is not None else self._queue.get()
            carried = None
            if isinstance(item, _Append):
                batch, carried = self._drain_batch(item)
                self._commit_batch(batch)
                self._checkpoint_if_due()
            elif isinstance(item, _Call):
                self._run_call(item)
            else:
                self._stop(item)
                return

    def _drain_batch(self, first: _Append) -> tuple[list[_Append], _Item | None]:
        """Take what is already queued (no waiting) up to the caps; return a non-append item."""
        batch = [first]
        rows, size = len(first.rows), first.size
        while rows < self._max_rows and size < self._max_bytes:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, None
            if not isinstance(item, _Append):
                return batch, item
            batch.append(item)
            rows += len(item.rows)
            size += item.size
        return batch, None

    def _checkpoint_if_due(self) -> None:
        """SQLite's automatic checkpoint would run inside the COMMIT that crosses its threshold
        and delay that commit's publishing by milliseconds; the checkpointer runs it beside."""
        if (
            self._commits_since_checkpoint < CHECKPOINT_COMMITS
            and self._bytes_since_checkpoint < CHECKPOINT_BYTES
        ):
            return
        self._checkpointer.request()
        self._commits_since_checkpoint = 0
        self._bytes_since_checkpoint = 0

    def _commit_batch(self, batch: list[_Append]) -> None:
        started = time.monotonic()
        try:
            self._insert([row for append in batch for row in append.rows])
            outcomes = [(append.on_committed, True) for append in batch]
            self._committed("append", started)
        except Exception as exc:
            # Retry each append on its own so one bad group does not take the others with it.
            outcomes = (
                [(append.on_committed, self._insert_alone(append)) for append in batch]
                if len(batch) > 1
                else [(batch[0].on_committed, self._failed(exc, len(batch[0].rows)))]
            )
        callbacks = [(callback, ok) for callback, ok in outcomes if callback is not None]
        if callbacks:
            self._to_loop(_run_callbacks, callbacks)

    def _insert_alone(self, append: _Append) -> bool:
        try:
            self._insert(append.rows)
        except Exception as exc:
            return self._failed(exc, len(append.rows))
        return True

    def _insert(self, rows: Sequence[LogRow]) -> None:
        if len(rows) <= SINGLE_STATEMENT_ROWS:
            statement = _multi_row_insert(_INSERT_LOG_ROW, len(rows))
            values = [value for row in rows for value in _view_row(row)]
            self._conn.execute(statement, values)
        else:  # a flood: the trigger's per-row cost would show, the trips would not
            messages = [row for row in rows if type(row) is MessageRow]
            events = [row for row in rows if type(row) is EventRow]
            positions = [row for row in rows if type(row) is HolderPositionRow]
            taken = [(row.queued_id,) for row in rows if type(row) is QueuedMessageTakenRow]
            keys = [
                (row.key, row.session_id, row.created_at)
                for row in rows
                if type(row) is IdempotencyKeyRow
            ]
            with transaction(self._conn):
                _insert_rows(self._conn, INSERT_MESSAGE, messages)
                _insert_rows(self._conn, INSERT_EVENT, events)
                self._conn.executemany(UPSERT_HOLDER_POSITION, positions)
                self._conn.executemany(DELETE_QUEUED_MESSAGE, taken)
                self._conn.executemany(INSERT_IDEMPOTENCY_KEY, keys)
        self._batches_committed += 1
        self._rows_committed += len(rows)
        self._commits_since_checkpoint += 1
        self._bytes_since_checkpoint += sum([len(row.payload) for row in rows])

    def _committed(self, operation: str, started: float) -> None:
        self._last_commit_at = now = time.monotonic()
        observer().sqlite_operation(operation, now - started)

    def _failed(self, exc: BaseException, rows: int) -> bool:
        observer().sqlite_error(type(exc).__name__)
        self._degraded = True
        self._last_error = f"{type(exc).__name__}: {exc}"
        self._failed_writes += 1
        self._rows_lost += rows
        log.error(
            "storage write of %d rows failed (%s); live streaming continues, but these rows "
            "are missing from the stored history",
            rows,
            self._last_error,
            extra={"error_type": type(exc).__name__},
        )
        return False

    def _run_call(self, item: _Call[Any]) -> None:
        started = time.monotonic()
        try:
            with transaction(self._conn):
                result = item.fn(self._conn)
            self._committed("call", started)
        except Exception as exc:
            if isinstance(exc, sqlite3.Error):
                self._failed(exc, 0)
            self._to_loop(_settle, item.future, None, exc)
        else:
            self._to_loop(_settle, item.future, result, None)

    def _stop(self, item: _Stop) -> None:
        self._checkpointer.close()
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint at close failed: %s", exc)
        self._conn.close()
        self._reject_leftovers()
        self._to_loop(_settle, item.done, None, None)

    def _reject_leftovers(self) -> None:
        """Fail anything that raced in behind the stop marker instead of dropping it silently."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Append):
                if item.on_committed is not None:
                    self._to_loop(_run_callbacks, [(item.on_committed, False)])
            elif isinstance(item, _Call):
                self._to_loop(_settle, item.future, None, StoreClosed("the store writer closed"))

    def _to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            log.warning("event loop closed; a storage completion could not be delivered")


def _view_row(row: LogRow) -> tuple[object, ...]:
    """A row as the columns of the log_rows view."""
    if type(row) is HolderPositionRow:
        return (2, row.session_id, row.stdout_offset, None, row.holder_id, None, row.created_at)
    if type(row) is QueuedMessageTakenRow:
        return (3, row.session_id, row.queued_id, None, "", None, row.created_at)
    if type(row) is IdempotencyKeyRow:
        return (4, row.session_id, 0, None, row.key, None, row.created_at)
    return (type(row) is MessageRow, *row)


def _insert_rows(conn: sqlite3.Connection, insert: str, rows: Sequence[LogRow]) -> None:
    """INSERTs `rows` with few statements: multi-row INSERTs of power-of-two sizes.

    Every statement is one trip into SQLite, and each trip gives the GIL away and must win it
    back; with a busy event loop each win can take a whole switch interval (5 ms). Rows one
    by one (executemany) would make a commit's latency grow with its size. The sizes are few,
    so their statements stay in the connection's statement cache.
    """
    done, total = 0, len(rows)
    while done < total:
        size = min(MAX_ROWS_PER_STATEMENT, 1 << ((total - done).bit_length() - 1))
        chunk = rows[done : done + size]
        conn.execute(_multi_row_insert(insert, size), [value for row in chunk for value in row])
        done += size


@functools.cache
def _multi_row_insert(insert: str, rows: int) -> str:
    """`INSERT ... VALUES (?, ...)` turned into one statement inserting `rows` rows."""
    head, values = insert.split(" VALUES ")
    return f"{head} VALUES {', '.join([values] * rows)}"


def _run_callbacks(callbacks: list[tuple[OnCommitted, bool]]) -> None:
    for callback, ok in callbacks:
        try:
            callback(ok)
        except Exception:
            log.exception("a commit callback raised; the other callbacks still ran")


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
