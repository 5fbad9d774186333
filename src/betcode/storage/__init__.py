"""SQLite persistence: schema + migrations, the single group-commit writer, replay reads,
startup reconciliation, and typed repositories (sessions, pending permissions, grants,
connected clients, idempotency keys).

Writes run on the writer thread (`StoreWriter.append` for the log, `StoreWriter.call` for
everything else); reads run in worker threads (`StoreReader`). Nothing here touches SQLite on
the event loop.
"""

from betcode.storage.database import Database, open_database, transaction
from betcode.storage.errors import MigrationError, StorageCorrupt, StorageError, StoreClosed
from betcode.storage.reader import StoreReader
from betcode.storage.reconcile import ReconcileReport, reconcile
from betcode.storage.rows import EventRow, LogRow, MessageRow
from betcode.storage.writer import StoreWriter, WriterHealth

__all__ = [
    "Database",
    "EventRow",
    "LogRow",
    "MessageRow",
    "MigrationError",
    "ReconcileReport",
    "StorageCorrupt",
    "StorageError",
    "StoreClosed",
    "StoreReader",
    "StoreWriter",
    "WriterHealth",
    "open_database",
    "reconcile",
    "transaction",
]
