"""What the store keeps of the holders (claude/holder): `holder_positions`, how much of each
session's holder output is committed (rows.py writes it with the lines; this module reads it),
and `holder_stdin`, the journal of lines for claude's stdin: each kept until its holder confirms
it, then only its key (what claude was given), until the holder ends."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Collection

from betcode.storage.errors import StoreClosed
from betcode.storage.writer import StoreWriter

log = logging.getLogger(__name__)


def committed_offset(conn: sqlite3.Connection, session_id: str, holder_id: str) -> int:
    """The committed offset into the stdout of `holder_id` (0: nothing of it committed yet)."""
    row = conn.execute(
        "SELECT stdout_offset FROM holder_positions WHERE session_id = ? AND holder_id = ?",
        (session_id, holder_id),
    ).fetchone()
    return 0 if row is None else int(row[0])


def unconfirmed_stdin(conn: sqlite3.Connection, holder_id: str) -> list[tuple[str, bytes]]:
    """(key, line) of every journaled line the holder has not confirmed, in the order kept."""
    rows = conn.execute(
        "SELECT key, line FROM holder_stdin WHERE holder_id = ? AND taken = 0 ORDER BY rowid",
        (holder_id,),
    )
    return [(str(key), bytes(line)) for key, line in rows]


def journaled_keys(conn: sqlite3.Connection, holder_id: str) -> set[str]:
    """The key of every line journaled for `holder_id`'s claude, confirmed or not."""
    rows = conn.execute("SELECT key FROM holder_stdin WHERE holder_id = ?", (holder_id,))
    return {str(key) for (key,) in rows}


def forget_stdin_of_gone_holders(conn: sqlite3.Connection, alive: Collection[str]) -> int:
    """At startup: journaled lines of holders no longer running will never be taken."""
    marks = ",".join("?" * len(alive))
    return conn.execute(
        f"DELETE FROM holder_stdin WHERE holder_id NOT IN ({marks})", tuple(alive)
    ).rowcount


class HolderStdinJournal:
    """One session's `StdinJournal` (claude/holder/client.py) in the store."""

    def __init__(self, writer: StoreWriter, session_id: str) -> None:
        self._writer = writer
        self._session_id = session_id

    async def keep(self, holder_id: str, key: str, line: bytes) -> None:
        await self._writer.call(
            lambda c: c.execute(
                "INSERT OR IGNORE INTO holder_stdin (session_id, holder_id, key, line) "
                "VALUES (?, ?, ?, ?)",
                (self._session_id, holder_id, key, line),
            )
        )

    def taken(self, holder_id: str, key: str) -> None:
        self._background(
            lambda c: c.execute(
                "UPDATE holder_stdin SET taken = 1, line = x'' WHERE holder_id = ? AND key = ?",
                (holder_id, key),
            )
        )

    def ended(self, holder_id: str) -> None:
        self._background(
            lambda c: c.execute("DELETE FROM holder_stdin WHERE holder_id = ?", (holder_id,))
        )

    def _background(self, write: Callable[[sqlite3.Connection], object]) -> None:
        try:
            self._writer.submit(write).add_done_callback(_log_failure)
        except StoreClosed:  # the daemon is stopping: the next one's startup forgets the rows
            log.warning("session %s: the stdin journal could not be updated", self._session_id)


def _log_failure(done: asyncio.Future[object]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.error("stdin journal write failed: %s", done.exception())
