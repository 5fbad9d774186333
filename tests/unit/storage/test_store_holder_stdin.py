"""What a re-attaching daemon sends claude again: the stdin journal (`holder_stdin`) and the
answers recorded for that claude's requests."""

from __future__ import annotations

import sqlite3

from store_helpers import NOW, add_session

from betcode.storage import StoreReader, StoreWriter
from betcode.storage.holders import (
    HolderStdinJournal,
    forget_stdin_of_gone_holders,
    journaled_keys,
    unconfirmed_stdin,
)
from betcode.storage.pending import (
    answer,
    answers_written_since,
    control_lines_since,
    insert_pending,
    mark_delivered,
)


async def test_the_journal_keeps_each_line_until_its_holder_took_it_then_its_key(
    writer: StoreWriter, reader: StoreReader
) -> None:
    await writer.call(add_session)
    journal = HolderStdinJournal(writer, "s1")
    for key in ("k1", "k2", "k3"):
        await journal.keep("h1", key, key.encode() + b"\n")
    await journal.keep("h1", "k1", b"again\n")  # sent again under its key: kept once, as first
    await journal.keep("h2", "k1", b"other holder\n")

    journal.taken("h1", "k2")
    await writer.call(lambda c: None)  # after the background update
    assert await reader.read(lambda c: unconfirmed_stdin(c, "h1")) == [
        ("k1", b"k1\n"),
        ("k3", b"k3\n"),
    ]
    # What claude was given is remembered (by key alone) while its holder lives.
    assert await reader.read(lambda c: journaled_keys(c, "h1")) == {"k1", "k2", "k3"}
    assert await reader.read(lambda c: journaled_keys(c, "h2")) == {"k1"}
    journal.ended("h1")
    await writer.call(lambda c: None)
    assert await reader.read(lambda c: unconfirmed_stdin(c, "h1")) == []
    assert await reader.read(lambda c: journaled_keys(c, "h1")) == set()
    assert await reader.read(lambda c: unconfirmed_stdin(c, "h2")) == [("k1", b"other holder\n")]


def test_at_startup_lines_of_holders_no_longer_running_are_forgotten(
    conn: sqlite3.Connection,
) -> None:
    add_session(conn)
    for holder in ("alive", "gone"):
        conn.execute(
            "INSERT INTO holder_stdin (session_id, holder_id, key, line) VALUES (?, ?, ?, ?)",
            ("s1", holder, "k", b"line\n"),
        )
    assert forget_stdin_of_gone_holders(conn, ["alive"]) == 1
    assert unconfirmed_stdin(conn, "alive") == [("k", b"line\n")]
    assert forget_stdin_of_gone_holders(conn, []) == 1  # none alive: all go
    assert unconfirmed_stdin(conn, "alive") == []


def ask(conn: sqlite3.Connection, request_id: str, received_at: float) -> None:
    insert_pending(
        conn,
        request_id=request_id,
        session_id="s1",
        tool_name="Edit",
        input_json="{}",
        dialect="stdio",
        received_at=received_at,
        expires_at=received_at + 3600,
    )


def test_answers_sent_again_are_those_written_to_the_claude_started_since(
    conn: sqlite3.Connection,
) -> None:
    add_session(conn)
    cases = {
        "before": (NOW - 1, "allow", True),  # asked by an earlier claude
        "written": (NOW + 1, "allow", True),
        "orphan": (NOW + 2, "allow", False),  # its claude was gone: not written to it
        "withdrawn": (NOW + 3, "cancelled", True),
        "later": (NOW + 4, "deny", True),
    }
    for request_id, (received_at, decision, delivered) in cases.items():
        ask(conn, request_id, received_at)
        answer(conn, request_id, decision=decision, payload=f'{{"id":"{request_id}"}}', now=NOW)
        if delivered:
            mark_delivered(conn, request_id)
    ask(conn, "unanswered", NOW + 5)

    assert answers_written_since(conn, "s1", NOW) == [b'{"id":"written"}\n', b'{"id":"later"}\n']


def test_control_lines_are_those_to_and_from_the_claude_started_since(
    conn: sqlite3.Connection,
) -> None:
    add_session(conn)
    lines = [
        (1, "out", "control_request", NOW - 1, "asked before"),  # an earlier claude's
        (2, "out", "control_request", NOW + 1, "asked"),
        (3, "out", "assistant", NOW + 2, "said"),
        (4, "in", "control_response", NOW + 3, "answered"),
        (5, "out", "control_cancel_request", NOW + 4, "withdrew"),
        (6, "out", "control_request", NOW + 5, "asked after"),  # past the bound
    ]
    conn.executemany(
        "INSERT INTO messages (session_id, sequence, direction, message_type, payload, "
        "created_at) VALUES ('s1', ?, ?, ?, ?, ?)",
        [(seq, direction, kind, payload, at) for seq, direction, kind, at, payload in lines],
    )

    assert control_lines_since(conn, "s1", NOW, through_sequence=5) == [
        ("out", b"asked"),
        ("in", b"answered"),
        ("out", b"withdrew"),
    ]
    assert control_lines_since(conn, "s1", NOW)[-1] == ("out", b"asked after")
