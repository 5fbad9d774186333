"""Connected clients and the input-lock CAS, session grants, idempotency keys."""

from __future__ import annotations

import asyncio
import sqlite3
from functools import partial

from store_helpers import NOW, add_session

from betcode.storage import StoreWriter
from betcode.storage.clients import (
    heartbeat,
    list_clients,
    record_input_lock,
    register_client,
    remove_client,
    stale_clients,
    transfer_input_lock,
)
from betcode.storage.grants import add_grant, clear_grants, find_grant, list_grants
from betcode.storage.idempotency import is_key_seen, purge_keys, remember_key
from betcode.storage.sessions import get_session


def holder(conn: sqlite3.Connection, session_id: str = "s1") -> str | None:
    session = get_session(conn, session_id)
    assert session is not None
    return session.input_lock_client


def flagged(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT client_id FROM connected_clients WHERE has_input_lock = 1")
    return sorted(client_id for (client_id,) in rows)


def test_input_lock_moves_by_compare_and_swap(conn: sqlite3.Connection) -> None:
    add_session(conn)
    for n, client in enumerate(("a", "b")):
        register_client(conn, client, "cli", NOW + n, session_id="s1")

    assert transfer_input_lock(conn, "s1", expected=None, new_holder="a")
    assert not transfer_input_lock(conn, "s1", expected=None, new_holder="b")  # a holds it
    assert (holder(conn), flagged(conn)) == ("a", ["a"])

    assert transfer_input_lock(conn, "s1", expected="a", new_holder="b")
    assert (holder(conn), flagged(conn)) == ("b", ["b"])

    assert transfer_input_lock(conn, "s1", expected="b", new_holder=None)
    assert (holder(conn), flagged(conn)) == (None, [])
    assert not transfer_input_lock(conn, "unknown", expected=None, new_holder="a")


def test_the_daemons_lock_holder_is_recorded_whatever_the_row_said(
    conn: sqlite3.Connection,
) -> None:
    add_session(conn)
    add_session(conn, "s2")
    for n, client in enumerate(("a", "b")):
        register_client(conn, client, "cli", NOW + n, session_id="s1")
    register_client(conn, "elsewhere", "cli", NOW, session_id="s2")
    record_input_lock(conn, "s2", "elsewhere")

    record_input_lock(conn, "s1", "a")
    assert (holder(conn), flagged(conn)) == ("a", ["a", "elsewhere"])
    remove_client(conn, "a")  # written before the move the daemon made when "a" left
    record_input_lock(conn, "s1", "b")
    assert (holder(conn), flagged(conn)) == ("b", ["b", "elsewhere"])
    record_input_lock(conn, "s1", None)
    assert (holder(conn), holder(conn, "s2"), flagged(conn)) == (None, "elsewhere", ["elsewhere"])


async def test_racing_lock_requests_have_one_winner(
    writer: StoreWriter, conn: sqlite3.Connection
) -> None:
    add_session(conn)
    clients = [f"c{n}" for n in range(10)]
    for client in clients:
        register_client(conn, client, "flutter", NOW, session_id="s1")

    results = await asyncio.gather(
        *(
            writer.call(
                partial(transfer_input_lock, session_id="s1", expected=None, new_holder=client)
            )
            for client in clients
        )
    )

    assert results.count(True) == 1
    winner = clients[results.index(True)]
    assert (holder(conn), flagged(conn)) == (winner, [winner])


def test_removing_the_holder_releases_the_lock(conn: sqlite3.Connection) -> None:
    add_session(conn)
    register_client(conn, "a", "cli", NOW, session_id="s1")
    register_client(conn, "b", "headless", NOW + 1, session_id="s1")
    transfer_input_lock(conn, "s1", expected=None, new_holder="a")

    assert remove_client(conn, "a")
    assert not remove_client(conn, "a")
    assert holder(conn) is None
    assert [c.client_id for c in list_clients(conn, "s1")] == ["b"]


def test_a_reconnecting_client_id_starts_over(conn: sqlite3.Connection) -> None:
    add_session(conn)
    register_client(conn, "a", "cli", NOW, session_id="s1")
    transfer_input_lock(conn, "s1", expected=None, new_holder="a")

    register_client(conn, "a", "cli", NOW + 5, session_id="s1")

    (client,) = list_clients(conn, "s1")
    assert (client.connected_at, client.has_input_lock) == (NOW + 5, False)
    assert holder(conn) is None


def test_silent_clients_are_found_by_heartbeat(conn: sqlite3.Connection) -> None:
    add_session(conn)
    register_client(conn, "quiet", "cli", NOW, session_id="s1")
    register_client(conn, "chatty", "cli", NOW, session_id="s1")

    assert heartbeat(conn, "chatty", NOW + 25)
    assert not heartbeat(conn, "gone", NOW + 25)

    assert [c.client_id for c in stale_clients(conn, NOW + 30 - 10)] == ["quiet"]


def test_newest_grant_wins_and_grants_clear_per_tool(conn: sqlite3.Connection) -> None:
    add_session(conn, "s1")
    add_session(conn, "s2")
    add_grant(conn, "s1", "Bash", "allow", NOW)
    latest = add_grant(conn, "s1", "Bash", "deny", NOW + 1, pattern="rm *")
    add_grant(conn, "s1", "Edit", "allow", NOW)
    add_grant(conn, "s2", "Bash", "allow", NOW)

    assert find_grant(conn, "s1", "Bash") == latest
    assert find_grant(conn, "s1", "Write") is None
    assert [g.tool_name for g in list_grants(conn, "s1")] == ["Bash", "Bash", "Edit"]

    assert clear_grants(conn, "s1", "Bash") == 2
    assert [g.tool_name for g in list_grants(conn, "s1")] == ["Edit"]
    assert clear_grants(conn, "s1") == 1
    assert list_grants(conn, "s1") == []
    assert len(list_grants(conn, "s2")) == 1  # never across sessions


def test_idempotency_keys_are_remembered_then_purged(conn: sqlite3.Connection) -> None:
    assert remember_key(conn, "k1", "s1", NOW)
    assert not remember_key(conn, "k1", "s1", NOW + 1)
    assert remember_key(conn, "k2", "s1", NOW + 50_000)
    assert is_key_seen(conn, "k1")

    assert purge_keys(conn, NOW + 86_401) == 1

    assert not is_key_seen(conn, "k1")
    assert is_key_seen(conn, "k2")
