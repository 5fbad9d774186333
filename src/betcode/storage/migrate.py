"""Versioned schema migrations: ordered `NNNN_description.sql` files, each applied atomically.

A migration file is append-only once released. Each one runs in its own transaction together
with its row in `schema_migrations`, so a failure leaves the database at the previous version.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from betcode.storage.errors import MigrationError

log = logging.getLogger(__name__)

MIGRATION_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")

_TRACKING_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at REAL NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def bundled_migrations() -> list[Migration]:
    """The migrations shipped with BetCode (src/betcode/storage/migrations/)."""
    return load_migrations(resources.files("betcode.storage") / "migrations")


def load_migrations(directory: Traversable | Path) -> list[Migration]:
    """Every `NNNN_description.sql` in `directory`, in version order.

    Other files are ignored; a `.sql` file with a malformed name or a repeated version is an
    error, because silently skipping it would leave the schema incomplete.
    """
    migrations: list[Migration] = []
    for entry in directory.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = MIGRATION_FILE.match(entry.name)
        if match is None:
            raise MigrationError(
                f"migration file {entry.name!r} is not named NNNN_description.sql "
                "(four digits, underscore, lowercase words)"
            )
        migrations.append(
            Migration(int(match["version"]), match["name"], entry.read_text(encoding="utf-8"))
        )
    migrations.sort(key=lambda m: m.version)
    _reject_duplicate_versions(migrations)
    return migrations


def _reject_duplicate_versions(migrations: Sequence[Migration]) -> None:
    for previous, current in itertools.pairwise(migrations):
        if previous.version == current.version:
            raise MigrationError(
                f"two migrations share version {current.version:04d}: "
                f"{previous.name!r} and {current.name!r}"
            )


def schema_version(conn: sqlite3.Connection) -> int:
    """The highest applied migration version (0 for a fresh database)."""
    conn.execute(_TRACKING_TABLE)
    row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
    return int(row[0])


def apply_migrations(conn: sqlite3.Connection, migrations: Iterable[Migration]) -> int:
    """Apply every migration not yet recorded; return the resulting schema version.

    `conn` must be in autocommit mode (isolation_level=None) with no open transaction.
    """
    known = list(migrations)
    applied = _applied_checksums(conn)
    newest_known = max((m.version for m in known), default=0)
    if applied and max(applied) > newest_known:
        raise MigrationError(
            f"the database is at schema version {max(applied):04d} but this BetCode only knows "
            f"up to {newest_known:04d}; upgrade BetCode or use a different data directory"
        )
    for migration in known:
        recorded = applied.get(migration.version)
        if recorded is None:
            _apply_one(conn, migration)
        elif recorded != migration.checksum:
            log.warning(
                "migration %04d_%s changed after it was applied; released migrations must "
                "not be edited (add a new one instead)",
                migration.version,
                migration.name,
            )
    return schema_version(conn)


def _applied_checksums(conn: sqlite3.Connection) -> dict[int, str]:
    conn.execute(_TRACKING_TABLE)
    rows = conn.execute("SELECT version, checksum FROM schema_migrations").fetchall()
    return {int(version): str(checksum) for version, checksum in rows}


def _apply_one(conn: sqlite3.Connection, migration: Migration) -> None:
    label = f"{migration.version:04d}_{migration.name}"
    try:
        # executescript runs the file's statements in the transaction opened here; it only
        # commits on its own if a transaction was already open, which `conn` must not have.
        conn.executescript("BEGIN IMMEDIATE;\n" + migration.sql)
        conn.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_at) "
            "VALUES (?, ?, ?, ?)",
            (migration.version, migration.name, migration.checksum, time.time()),
        )
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise MigrationError(
            f"migration {label} failed: {exc}; the database was left at schema version "
            f"{schema_version(conn):04d} and nothing of {label} was kept"
        ) from exc
    log.info("applied migration %s", label)
