"""Opening the database: file mode, PRAGMAs, integrity check, versioned migrations."""

from __future__ import annotations

import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from betcode.storage import MigrationError, StorageCorrupt, open_database, transaction
from betcode.storage.migrate import bundled_migrations, load_migrations

EXPECTED_TABLES = {
    "sessions",
    "messages",
    "events",
    "permission_grants",
    "pending_permissions",
    "worktrees",
    "connected_clients",
    "subagents",
    "orchestrations",
    "orchestration_steps",
    "todos",
    "audit_log",
    "processed_idempotency_keys",
    "schema_migrations",
}


def tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    return {name for (name,) in rows} - {"sqlite_sequence"}


def migrations_copy(tmp_path: Path) -> Path:
    directory = tmp_path / "migrations"
    directory.mkdir()
    for migration in bundled_migrations():
        (directory / f"{migration.version:04d}_{migration.name}.sql").write_text(migration.sql)
    return directory


def test_fresh_database_has_the_whole_schema_and_private_files(tmp_path: Path) -> None:
    database = open_database(tmp_path / "data" / "daemon.db")
    assert database.schema_version == len(bundled_migrations())
    conn = database.connect()
    conn.execute("CREATE TABLE probe (x)")  # creates the -wal file
    assert tables(conn) >= EXPECTED_TABLES
    for name in ("daemon.db", "daemon.db-wal"):
        assert stat.S_IMODE((tmp_path / "data" / name).stat().st_mode) == 0o600
    conn.close()


def test_connections_use_the_required_pragmas(tmp_path: Path) -> None:
    conn = open_database(tmp_path / "daemon.db").connect()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    conn.close()


def test_existing_file_with_a_wide_mode_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "daemon.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    open_database(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_reopening_applies_nothing_again_and_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "daemon.db"
    conn = open_database(path).connect()
    conn.execute(
        "INSERT INTO worktrees (id, name, path, branch, repo_path, created_at, last_active) "
        "VALUES ('w', 'n', '/p', 'b', '/r', 1, 1)"
    )
    conn.close()

    reopened = open_database(path)

    conn = reopened.connect()
    assert reopened.schema_version == len(bundled_migrations())
    assert conn.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0] == len(
        bundled_migrations()
    )
    assert conn.execute("SELECT id FROM worktrees").fetchall() == [("w",)]
    conn.close()


def test_a_failing_migration_leaves_the_previous_version(tmp_path: Path) -> None:
    directory = migrations_copy(tmp_path)
    path = tmp_path / "daemon.db"
    previous = open_database(path, migrations=load_migrations(directory)).schema_version
    (directory / "0900_broken.sql").write_text(
        "CREATE TABLE half_done (x INTEGER);\nINSERT INTO no_such_table VALUES (1);\n"
    )

    with pytest.raises(MigrationError, match=r"0900_broken failed: .*no_such_table") as error:
        open_database(path, migrations=load_migrations(directory))

    assert f"schema version {previous:04d}" in str(error.value)
    conn = open_database(path).connect()
    assert "half_done" not in tables(conn)
    assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == previous
    conn.close()


def test_a_new_migration_is_applied_on_the_next_open(tmp_path: Path) -> None:
    directory = migrations_copy(tmp_path)
    path = tmp_path / "daemon.db"
    open_database(path, migrations=load_migrations(directory))
    (directory / "0900_add_notes.sql").write_text("ALTER TABLE sessions ADD COLUMN notes TEXT;")

    database = open_database(path, migrations=load_migrations(directory))

    assert database.schema_version == 900
    conn = database.connect()
    columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    assert "notes" in columns
    conn.close()


def test_a_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    directory = migrations_copy(tmp_path)
    path = tmp_path / "daemon.db"
    (directory / "0900_future.sql").write_text("CREATE TABLE future (x);")
    open_database(path, migrations=load_migrations(directory))

    with pytest.raises(MigrationError, match="schema version 0900 but this BetCode only knows"):
        open_database(path)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"1_short.sql": ""}, "not named NNNN_description.sql"),
        ({"0001_a.sql": "", "0001_b.sql": ""}, "two migrations share version 0001"),
    ],
)
def test_malformed_migration_sets_are_rejected(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    for name, sql in files.items():
        (tmp_path / name).write_text(sql)
    with pytest.raises(MigrationError, match=message):
        load_migrations(tmp_path)


def test_a_file_that_is_not_a_database_is_reported_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "daemon.db"
    path.write_bytes(b"this is not sqlite at all " * 200)

    with pytest.raises(StorageCorrupt, match="failed its integrity check"):
        open_database(path)
    assert path.read_bytes().startswith(b"this is not sqlite")  # nothing was changed


def test_a_damaged_database_is_reported_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "daemon.db"
    conn = open_database(path).connect()
    conn.execute("CREATE TABLE filler (x TEXT)")
    with transaction(conn):
        conn.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,)] * 2000)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    damaged = bytearray(path.read_bytes())
    page_size = 4096
    for page in range(2, len(damaged) // page_size):  # every page after the schema page
        start = page * page_size
        damaged[start : start + 64] = b"\xa5" * 64
    path.write_bytes(bytes(damaged))
    shutil.copy(path, tmp_path / "before.db")

    with pytest.raises(StorageCorrupt):
        open_database(path)
    assert path.read_bytes() == (tmp_path / "before.db").read_bytes()
