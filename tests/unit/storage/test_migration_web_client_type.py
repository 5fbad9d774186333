"""Migration 0005: `connected_clients.client_type` also allows `web` (the daemon's browser
client); a database made by the previous schema keeps every row it had."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from betcode.storage import open_database
from betcode.storage.migrate import bundled_migrations

WEB_CLIENT_TYPE_VERSION = 5

CLIENT_COLUMNS = "client_id, session_id, client_type, has_input_lock, connected_at, last_heartbeat"
ROWS_BEFORE = [
    ("terminal", "s1", "cli", 1, 10.0, 11.5),
    ("phone", "s1", "flutter", 0, 12.0, 12.0),
    ("script", None, "headless", 0, 13.0, 14.0),
]


def database_before_web(path: Path) -> None:
    """A database at the schema before 0005, with a session and a client of each old type."""
    earlier = [m for m in bundled_migrations() if m.version < WEB_CLIENT_TYPE_VERSION]
    conn = open_database(path, migrations=earlier).connect()
    conn.execute(
        "INSERT INTO sessions (id, model, working_directory, input_lock_client, created_at, "
        "updated_at) VALUES ('s1', 'm', '/w', 'terminal', 1, 1)"
    )
    conn.executemany(
        f"INSERT INTO connected_clients ({CLIENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)", ROWS_BEFORE
    )
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute(
            f"INSERT INTO connected_clients ({CLIENT_COLUMNS}) VALUES ('tab', 's1', 'web', 0, 1, 1)"
        )
    conn.close()


def test_an_existing_database_keeps_its_clients_and_accepts_web(tmp_path: Path) -> None:
    path = tmp_path / "daemon.db"
    database_before_web(path)

    database = open_database(path)

    assert database.schema_version >= WEB_CLIENT_TYPE_VERSION
    conn = database.connect()
    rows = conn.execute(f"SELECT {CLIENT_COLUMNS} FROM connected_clients ORDER BY client_id")
    assert rows.fetchall() == sorted(ROWS_BEFORE)
    conn.execute(
        f"INSERT INTO connected_clients ({CLIENT_COLUMNS}) VALUES ('web-tab', 's1', 'web', 0, 2, 2)"
    )
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute(
            f"INSERT INTO connected_clients ({CLIENT_COLUMNS}) VALUES ('x', 's1', 'robot', 0, 3, 3)"
        )
    # The rebuilt table keeps its indexes and its link to sessions.
    indexes = {row[1] for row in conn.execute("PRAGMA index_list(connected_clients)")}
    assert {"idx_clients_session", "idx_clients_heartbeat"} <= indexes
    conn.execute("DELETE FROM sessions WHERE id = 's1'")
    sessions = conn.execute("SELECT DISTINCT session_id FROM connected_clients").fetchall()
    assert sessions == [(None,)]
    conn.close()
