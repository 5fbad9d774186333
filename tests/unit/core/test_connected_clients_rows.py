"""ConnectedClients against a real store: one row per client id while any of its streams is
attached, written in the order things happened, never raising into the stream."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest

from betcode.core.connected import ConnectedClients
from betcode.storage import StoreWriter, open_database
from betcode.storage.clients import ConnectedClient, list_clients
from betcode.storage.reconcile import reconcile
from betcode.storage.sessions import create_session


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[StoreWriter]:
    database = open_database(tmp_path / "daemon.db")
    store = StoreWriter(database)
    for session_id in ("s1", "s2"):
        await store.call(
            partial(
                create_session, session_id=session_id, model="m", working_directory="/w", now=1.0
            )
        )
    yield store
    await store.close()


async def settle() -> None:
    """Let the tasks ConnectedClients started submit their writes (and report their end)."""
    for _ in range(2):
        await asyncio.sleep(0)


async def rows(writer: StoreWriter, session_id: str = "s1") -> list[ConnectedClient]:
    await settle()
    # Queued behind every write submitted so far: the writer runs its calls in order.
    return await writer.call(lambda c: list_clients(c, session_id))


async def test_a_row_lives_while_any_stream_of_the_client_is_attached(
    writer: StoreWriter,
) -> None:
    clients = ConnectedClients(writer, Clock())
    with clients.attached("a", "s1", "flutter"):
        [row] = await rows(writer)
        assert (row.client_id, row.session_id, row.client_type) == ("a", "s1", "flutter")
        assert row.connected_at == row.last_heartbeat == 1_001.0
        with clients.attached("a", "s2", "cli"):  # a second stream: still the first row
            assert [r.session_id for r in await rows(writer)] == ["s1"]
            assert await rows(writer, "s2") == []
        assert [r.client_id for r in await rows(writer)] == ["a"]
        clients.seen("a")
        [row] = await rows(writer)
        assert row.last_heartbeat > row.connected_at
    assert await rows(writer) == []


async def test_a_stream_that_fails_still_removes_its_row(writer: StoreWriter) -> None:
    clients = ConnectedClients(writer, Clock())
    with pytest.raises(RuntimeError), clients.attached("a", "s1", "headless"):
        raise RuntimeError("the stream broke")
    assert await rows(writer) == []


async def test_unknown_clients_and_a_closed_store_are_no_errors(
    writer: StoreWriter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="betcode.core.connected")
    clients = ConnectedClients(writer, Clock())
    clients.seen("nobody")  # not attached: nothing to write
    assert await rows(writer) == []
    with clients.attached("late", "s1", "cli"):
        await rows(writer)
        await writer.close()  # the daemon shutting down under an attached stream
    await settle()
    assert "the store is closed" in caplog.text


def test_rows_survive_in_sqlite_until_reconciliation(tmp_path: Path) -> None:
    """What a killed daemon leaves behind is what startup reconciliation clears."""
    database = open_database(tmp_path / "daemon.db")
    conn = database.connect()
    try:
        create_session(conn, session_id="s1", model="m", working_directory="/w", now=1.0)
        conn.execute(
            "INSERT INTO connected_clients (client_id, session_id, client_type, connected_at, "
            "last_heartbeat) VALUES ('ghost', 's1', 'cli', 1, 1)"
        )
        conn.commit()
        report = reconcile(conn, 2.0)
        assert report.clients_cleared == 1
        assert conn.execute("SELECT COUNT(*) FROM connected_clients").fetchone() == (0,)
    finally:
        conn.close()
