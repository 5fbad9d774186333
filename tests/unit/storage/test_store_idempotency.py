"""Idempotency keys count for a window, expire on their own, and can be given back."""

from __future__ import annotations

import sqlite3

from store_helpers import NOW

from betcode.storage.idempotency import (
    IDEMPOTENCY_WINDOW_SECONDS,
    is_key_seen,
    key_recorded,
    remember_key,
)

WINDOW = IDEMPOTENCY_WINDOW_SECONDS


def keys(conn: sqlite3.Connection) -> list[str]:
    return [key for (key,) in conn.execute("SELECT key FROM processed_idempotency_keys")]


def test_a_key_is_a_duplicate_within_the_window_and_new_after_it(
    conn: sqlite3.Connection,
) -> None:
    assert remember_key(conn, "k1", "s1", NOW)
    assert not remember_key(conn, "k1", "s1", NOW + WINDOW - 1)
    assert remember_key(conn, "k1", "s1", NOW + WINDOW + 1)  # seen, but too long ago


def test_remembering_drops_expired_keys(conn: sqlite3.Connection) -> None:
    for n in range(5):
        assert remember_key(conn, f"old-{n}", "s1", NOW + n)
    assert remember_key(conn, "recent", "s1", NOW + WINDOW - 10)
    assert len(keys(conn)) == 6
    assert remember_key(conn, "new", "s1", NOW + WINDOW + 3)  # old-0 .. old-2 expired
    assert sorted(keys(conn)) == ["new", "old-3", "old-4", "recent"]


def test_a_key_counts_as_recorded_within_the_window_only(conn: sqlite3.Connection) -> None:
    assert not key_recorded(conn, "k1", NOW)
    assert remember_key(conn, "k1", "s1", NOW)
    assert key_recorded(conn, "k1", NOW + WINDOW - 1)
    assert not key_recorded(conn, "k1", NOW + WINDOW + 1)  # too long ago: dropped
    assert not is_key_seen(conn, "k1")
