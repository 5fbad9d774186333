"""Shared fixtures for the storage tests: a real migrated database file in tmp_path."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from betcode.storage import Database, StoreReader, StoreWriter, open_database


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return open_database(tmp_path / "daemon.db")


@pytest.fixture
def conn(database: Database) -> Iterator[sqlite3.Connection]:
    connection = database.connect()
    yield connection
    connection.close()


@pytest.fixture
async def writer(database: Database) -> AsyncIterator[StoreWriter]:
    store_writer = StoreWriter(database)
    yield store_writer
    await store_writer.close()


@pytest.fixture
def reader(database: Database) -> Iterator[StoreReader]:
    store_reader = StoreReader(database)
    yield store_reader
    store_reader.close()
