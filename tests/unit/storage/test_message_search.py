"""Migration 0011 and `storage.search`: the text of user and assistant messages is indexed as
lines are stored (and those of a database made before it when it is migrated), a line with no
text or no JSON is stored without an index row, and removing lines removes their rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from betcode.storage import open_database
from betcode.storage.migrate import bundled_migrations
from betcode.storage.search import match_expression, search_messages

SEARCH_VERSIONS = (11, 14)  # the index made; remade with each message's session


def line(kind: str, content: object) -> str:
    return json.dumps({"type": kind, "message": {"role": kind, "content": content}})


ASSISTANT = line(
    "assistant",
    [
        {"type": "text", "text": "The giraffe eats leaves."},
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "giraffe"}},
        {"type": "text", "text": "Then it sleeps."},
    ],
)
TOOL_RESULT = line("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "giraffe"}])


def add(conn: sqlite3.Connection, session: str, sequence: int, kind: str, payload: str) -> None:
    conn.execute(
        "INSERT INTO messages (session_id, sequence, direction, message_type, payload, "
        "created_at) VALUES (?, ?, 'out', ?, ?, ?)",
        (session, sequence, kind, payload, 100.0 + sequence),
    )


def add_session(conn: sqlite3.Connection, session: str, name: str = "") -> None:
    conn.execute(
        "INSERT INTO sessions (id, model, working_directory, name, created_at, updated_at) "
        "VALUES (?, 'm', '/w', ?, 1, 1)",
        (session, name),
    )


@pytest.mark.parametrize("version", SEARCH_VERSIONS)
def test_lines_stored_before_the_migration_are_indexed_by_it(tmp_path: Path, version: int) -> None:
    path = tmp_path / "daemon.db"
    earlier = [m for m in bundled_migrations() if m.version < version]
    conn = open_database(path, migrations=earlier).connect()
    add_session(conn, "s1", "zoo")
    add(conn, "s1", 1, "user", line("user", "where does the giraffe sleep?"))
    add(conn, "s1", 2, "assistant", ASSISTANT)
    add(conn, "s1", 3, "user", TOOL_RESULT)
    conn.commit()
    conn.close()

    conn = open_database(path).connect()
    hits = search_messages(conn, "giraffe", limit=10)
    assert sorted((h.sequence, h.role) for h in hits) == [(1, "user"), (2, "assistant")]
    assert {h.session_name for h in hits} == {"zoo"}
    assistant = next(h for h in hits if h.role == "assistant")
    assert assistant.snippet == "The [giraffe] eats leaves. Then it sleeps."
    assert assistant.created_at == 102.0


def test_new_lines_are_indexed_and_deletes_remove_them(conn: sqlite3.Connection) -> None:
    add_session(conn, "s1")
    add_session(conn, "s2")
    add(conn, "s1", 1, "assistant", ASSISTANT)
    add(conn, "s1", 2, "assistant", "{not json: giraffe")  # stored all the same
    add(conn, "s1", 3, "system", json.dumps({"type": "system", "text": "giraffe"}))
    add(conn, "s2", 1, "user", line("user", "a giraffe too"))
    conn.commit()
    assert conn.execute("SELECT COUNT(*) FROM messages").fetchone() == (4,)
    assert search_messages(conn, "gira", limit=10) == []  # whole words unless it ends in *
    assert {(h.session_id, h.sequence) for h in search_messages(conn, "gira*", limit=10)} == {
        ("s1", 1),
        ("s2", 1),
    }
    assert [h.session_id for h in search_messages(conn, "giraffe", limit=10, session_id="s2")] == [
        "s2"
    ]
    assert search_messages(conn, "giraffe", limit=10, session_id="s3") == []
    assert search_messages(conn, "GIRAFFE sleeps", limit=10)[0].sequence == 1  # all words
    assert search_messages(conn, "giraffe elephant", limit=10) == []

    conn.execute("DELETE FROM sessions WHERE id = 's1'")  # its messages go by cascade
    conn.commit()
    assert [h.session_id for h in search_messages(conn, "giraffe", limit=10)] == ["s2"]
    assert conn.execute("SELECT COUNT(*) FROM message_search").fetchone() == (1,)


def test_a_query_is_words_never_fts_syntax(conn: sqlite3.Connection) -> None:
    assert match_expression('say "hi" OR (x de*') == '"say" """hi""" "OR" "(x" "de"*'
    assert match_expression("   ") == ""
    assert match_expression("*") == '"*"'
    add_session(conn, "s1")
    add(conn, "s1", 1, "user", line("user", 'she said "hi" OR (x) NEAR'))
    conn.commit()
    assert len(search_messages(conn, 'said "hi" OR (x', limit=10)) == 1
    assert search_messages(conn, "", limit=10) == []


def test_one_sessions_search_tells_sessions_with_dashed_ids_apart(conn: sqlite3.Connection) -> None:
    ids = ("abcd-0001", "abcd-0002", "abcd0001")  # the index keeps them without their dashes
    for session_id in ids:
        add_session(conn, session_id)
        add(conn, session_id, 1, "user", line("user", f"giraffe in {session_id}"))
    conn.commit()
    for session_id in ids:
        found = search_messages(conn, "giraffe", limit=10, session_id=session_id)
        assert [h.session_id for h in found] == [session_id]
