"""Named storage errors: each message says what went wrong and what the user can do."""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every error raised by betcode.storage."""


class StorageCorrupt(StorageError):
    """The database file failed its integrity check or is not a SQLite database."""


class MigrationError(StorageError):
    """A schema migration could not be applied; the database stays at its previous version."""


class StoreClosed(StorageError):
    """A write was submitted after the writer was closed."""
