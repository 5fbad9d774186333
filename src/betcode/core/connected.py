"""Keeps the `connected_clients` table in step with the clients attached to sessions.

A client id gets a row while at least one of its streams (Converse, ResumeSession) is attached:
the session it attached to, its type, when it attached and when it was last heard from. The
rows are written through the store writer without waiting, in the order things happened, so
a stream never waits on SQLite. Startup reconciliation clears rows a killed daemon left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator

from betcode.storage import clients as client_rows
from betcode.storage.clients import ClientType
from betcode.storage.errors import StoreClosed
from betcode.storage.writer import StoreWriter

log = logging.getLogger(__name__)


class ConnectedClients:
    def __init__(self, writer: StoreWriter, clock: Callable[[], float] = time.time) -> None:
        self._writer = writer
        self._clock = clock
        self._streams: dict[str, int] = {}  # client id -> streams attached now
        self._writes: set[asyncio.Future[object]] = set()

    @contextlib.contextmanager
    def attached(self, client_id: str, session_id: str, client_type: ClientType) -> Iterator[None]:
        """The client's row exists while this block runs (and while its other streams do).

        One row per client id (the table's key): a client attached to two sessions at once is
        listed under the session it attached to first."""
        streams = self._streams.get(client_id, 0)
        self._streams[client_id] = streams + 1
        if streams == 0:
            now = self._clock()
            self._write(
                lambda c: client_rows.register_client(
                    c, client_id, client_type, now, session_id=session_id
                )
            )
        try:
            yield
        finally:
            self._detach(client_id)

    def seen(self, client_id: str) -> None:
        """The client sent something (a request or a heartbeat): bump its last_heartbeat."""
        if client_id in self._streams:
            now = self._clock()
            self._write(lambda c: client_rows.heartbeat(c, client_id, now))

    def _detach(self, client_id: str) -> None:
        streams = self._streams.pop(client_id, 0) - 1
        if streams > 0:
            self._streams[client_id] = streams
        else:
            self._write(lambda c: client_rows.remove_client(c, client_id))

    def _write(self, fn: Callable[[sqlite3.Connection], object]) -> None:
        try:
            task = self._writer.submit(fn)  # queued now: the writer gets the calls in this order
        except StoreClosed:
            log.info("connected_clients not updated: the store is closed (reconciled at start)")
            return
        self._writes.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Future[object]) -> None:
        self._writes.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, StoreClosed):
            log.info("connected_clients not updated: the store is closed (reconciled at start)")
        elif error is not None:
            log.error("connected_clients update failed: %s", error)
