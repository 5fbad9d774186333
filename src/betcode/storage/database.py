"""Opening the daemon database: private file, PRAGMAs, integrity check, migrations."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from betcode.storage.errors import StorageCorrupt, StorageError
from betcode.storage.migrate import Migration, apply_migrations, bundled_migrations

BUSY_TIMEOUT_MS = 5000

# Per-connection settings (journal_mode=WAL is persistent and set once by open_database).
_CONNECTION_PRAGMAS = (
    "PRAGMA foreign_keys = ON",
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA synchronous = NORMAL",
)

# SQLite result codes (and their extended forms) meaning the file is damaged or not a database.
_CORRUPTION_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


@dataclass(frozen=True, slots=True)
class Database:
    """An opened, checked and migrated database file; hands out configured connections."""

    path: Path
    schema_version: int

    def connect(self, *, query_only: bool = False) -> sqlite3.Connection:
        return connect(self.path, query_only=query_only)


def connect(path: Path, *, query_only: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit) usable from any one thread.

    check_same_thread is off because connections are made on one thread and handed to the
    thread that owns them (the writer thread, or a reader pool); none is shared concurrently.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in _CONNECTION_PRAGMAS:
        conn.execute(pragma)
    if query_only:
        conn.execute("PRAGMA query_only = ON")
    return conn


def open_database(path: str | Path, *, migrations: Sequence[Migration] | None = None) -> Database:
    """Create (mode 0600) or open the database, check it, switch to WAL and migrate it.

    Raises StorageCorrupt when the file is damaged or not a database, MigrationError when a
    migration fails (the schema stays at the previous version), StorageError otherwise.
    """
    db_path = Path(path)
    _create_private_file(db_path)
    try:
        conn = connect(db_path)
        try:
            _check_integrity(conn, db_path)
            conn.execute("PRAGMA journal_mode = WAL")
            version = apply_migrations(
                conn, bundled_migrations() if migrations is None else migrations
            )
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise _classify(exc, db_path) from exc
    return Database(db_path, version)


def _create_private_file(path: Path) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        # An existing file may have been created with a wider mode; the log holds user code.
        os.chmod(path, 0o600)
    except OSError as exc:
        raise StorageError(f"cannot create or open the database file {path}: {exc}") from exc


def _check_integrity(conn: sqlite3.Connection, path: Path) -> None:
    problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        raise StorageCorrupt(_corrupt_message(path, "; ".join(problems)))


def _classify(exc: sqlite3.Error, path: Path) -> StorageError:
    if getattr(exc, "sqlite_errorname", "").startswith(_CORRUPTION_CODES):
        return StorageCorrupt(_corrupt_message(path, str(exc)))
    return StorageError(f"cannot use the database {path}: {exc}")


def _corrupt_message(path: Path, detail: str) -> str:
    return (
        f"the database {path} failed its integrity check ({detail}). Nothing was changed. "
        f"Stop the daemon, move the file aside (e.g. to {path.name}.corrupt) and restore a "
        "backup, or start with an empty data directory."
    )


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One atomic unit: BEGIN IMMEDIATE … COMMIT, or a SAVEPOINT when already inside one.

    Either way an exception rolls back exactly this unit and propagates.
    """
    if conn.in_transaction:
        conn.execute("SAVEPOINT betcode_unit")
        try:
            yield conn
            conn.execute("RELEASE betcode_unit")
        except BaseException:
            conn.execute("ROLLBACK TO betcode_unit")
            conn.execute("RELEASE betcode_unit")
            raise
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        _rollback_if_open(conn)
        raise


def _rollback_if_open(conn: sqlite3.Connection) -> None:
    # A failed COMMIT (e.g. SQLITE_BUSY) may leave the transaction open; a failed statement
    # inside may already have ended it.
    if conn.in_transaction:
        conn.execute("ROLLBACK")
