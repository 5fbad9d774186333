"""The sessions repository: create, list with filters and paging, updates, cascade delete."""

from __future__ import annotations

import sqlite3

import pytest
from store_helpers import NOW, add_session, line_and_events

from betcode.storage import transaction
from betcode.storage.clients import register_client
from betcode.storage.grants import add_grant
from betcode.storage.pending import insert_pending
from betcode.storage.rows import INSERT_EVENT, INSERT_MESSAGE, EventRow, MessageRow
from betcode.storage.sessions import (
    PREVIEW_MAX_CHARS,
    add_usage,
    create_session,
    delete_session,
    get_session,
    list_sessions,
    set_claude_session_id,
    set_model,
    set_name,
    set_preview,
    update_status,
)


def add_worktree(conn: sqlite3.Connection, worktree_id: str, path: str) -> None:
    conn.execute(
        "INSERT INTO worktrees (id, name, path, branch, repo_path, created_at, last_active) "
        "VALUES (?, ?, ?, 'main', '/repo', ?, ?)",
        (worktree_id, worktree_id, path, NOW, NOW),
    )


def test_a_new_session_has_defaults(conn: sqlite3.Connection) -> None:
    created = create_session(
        conn, session_id="s1", model="opus", working_directory="/w", now=NOW, name="fix bug"
    )

    assert created == get_session(conn, "s1")
    assert (created.status, created.name, created.model, created.working_directory) == (
        "idle",
        "fix bug",
        "opus",
        "/w",
    )
    assert (created.total_input_tokens, created.total_cost_usd, created.message_count) == (0, 0, 0)
    assert created.claude_session_id is None
    assert get_session(conn, "nope") is None


def test_list_filters_pages_and_counts(conn: sqlite3.Connection) -> None:
    add_worktree(conn, "wt", "/w/feature")
    for n in range(5):
        create_session(conn, session_id=f"a{n}", model="m", working_directory="/a", now=NOW + n)
    create_session(conn, session_id="b0", model="m", working_directory="/b", now=NOW)
    create_session(
        conn, session_id="w0", model="m", working_directory="/w/feature", worktree_id="wt", now=NOW
    )

    page = list_sessions(conn, working_directory="/a", limit=2, offset=1)
    assert [s.id for s in page.sessions] == ["a3", "a2"]  # newest update first
    assert page.total == 5
    assert [s.id for s in list_sessions(conn, worktree_id="wt").sessions] == ["w0"]
    assert list_sessions(conn).total == 7
    assert len(list_sessions(conn).sessions) == 7
    assert list_sessions(conn, working_directory="/none").total == 0


def test_updates_change_the_row_and_its_update_time(conn: sqlite3.Connection) -> None:
    add_session(conn)
    later = NOW + 10

    assert update_status(conn, "s1", "active", later)
    assert set_name(conn, "s1", "renamed", later)
    assert set_preview(conn, "s1", "p" * 500, later)
    assert set_claude_session_id(conn, "s1", "claude-123", later)
    assert set_model(conn, "s1", "haiku", later)
    assert add_usage(conn, "s1", input_tokens=10, output_tokens=5, cost_usd=0.25, now=later)
    assert add_usage(conn, "s1", input_tokens=1, output_tokens=2, cost_usd=0.5, now=later)

    session = get_session(conn, "s1")
    assert session is not None
    assert (session.status, session.name, session.claude_session_id, session.model) == (
        "active",
        "renamed",
        "claude-123",
        "haiku",
    )
    assert session.last_message_preview == "p" * PREVIEW_MAX_CHARS
    assert (session.total_input_tokens, session.total_output_tokens) == (11, 7)
    assert session.total_cost_usd == pytest.approx(0.75)
    assert session.updated_at == later
    assert not set_name(conn, "unknown", "x", later)


def test_an_invalid_status_is_refused(conn: sqlite3.Connection) -> None:
    add_session(conn)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        update_status(conn, "s1", "sleeping", NOW)  # type: ignore[arg-type]


def test_delete_cascades_to_everything_the_session_owns(conn: sqlite3.Connection) -> None:
    add_session(conn, "s1")
    add_session(conn, "keep")
    for session_id in ("s1", "keep"):
        rows = line_and_events(session_id, 1, 1)
        conn.execute(INSERT_MESSAGE, next(r for r in rows if isinstance(r, MessageRow)))
        conn.executemany(INSERT_EVENT, [r for r in rows if isinstance(r, EventRow)])
        add_grant(conn, session_id, "Bash", "allow", NOW)
        insert_pending(
            conn,
            request_id=f"req-{session_id}",
            session_id=session_id,
            tool_name="Bash",
            input_json="{}",
            dialect="stdio",
            received_at=NOW,
            expires_at=NOW + 60,
        )
        conn.execute(
            "INSERT INTO todos (session_id, subject, active_form, sequence, updated_at) "
            "VALUES (?, 'x', 'doing x', 1, ?)",
            (session_id, NOW),
        )
    register_client(conn, "c1", "cli", NOW, session_id="s1")
    assert get_session(conn, "s1") is not None
    assert get_session(conn, "s1").message_count == 1  # type: ignore[union-attr]

    with transaction(conn):
        assert delete_session(conn, "s1")

    for table in ("messages", "events", "permission_grants", "pending_permissions", "todos"):
        owners = {row[0] for row in conn.execute(f"SELECT session_id FROM {table}")}
        assert owners == {"keep"}, table
    assert conn.execute("SELECT session_id FROM connected_clients").fetchall() == [(None,)]
    assert not delete_session(conn, "s1")
