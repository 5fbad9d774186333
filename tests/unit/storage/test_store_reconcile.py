"""Startup reconciliation on a database left behind by a daemon killed mid-session."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from store_helpers import NOW, add_session

from betcode.storage import ReconcileReport, reconcile
from betcode.storage.clients import register_client, transfer_input_lock
from betcode.storage.reconcile import RESTART_SUMMARY
from betcode.storage.sessions import update_status

LATER = NOW + 3600


def killed_mid_session(conn: sqlite3.Connection, tmp_path: Path) -> None:
    """Rows as a daemon leaves them when SIGKILLed while a turn and subagents run."""
    (tmp_path / "alive").mkdir()
    for worktree_id, path in (("present", tmp_path / "alive"), ("gone", tmp_path / "removed")):
        conn.execute(
            "INSERT INTO worktrees (id, name, path, branch, repo_path, created_at, last_active) "
            "VALUES (?, ?, ?, 'main', '/repo', ?, ?)",
            (worktree_id, worktree_id, str(path), NOW, NOW),
        )
    for session_id, status in (("busy", "active"), ("other", "active"), ("rest", "idle")):
        add_session(conn, session_id)
        update_status(conn, session_id, status, NOW)  # type: ignore[arg-type]
    for client in ("c1", "c2", "c3"):
        register_client(conn, client, "cli", NOW, session_id="busy")
    transfer_input_lock(conn, "busy", expected=None, new_holder="c1")
    for n, status in enumerate(("pending", "running", "completed", "failed")):
        conn.execute(
            "INSERT INTO subagents (id, parent_session_id, session_id, name, status, prompt, "
            "working_directory, created_at) VALUES (?, 'busy', 'rest', 'helper', ?, 'p', '/', ?)",
            (f"sub{n}", status, NOW),
        )
    for orchestration_id, status in (("o-run", "running"), ("o-done", "completed")):
        conn.execute(
            "INSERT INTO orchestrations (id, parent_session_id, strategy, status, total_steps, "
            "created_at) VALUES (?, 'busy', 'dag', ?, 2, ?)",
            (orchestration_id, status, NOW),
        )
        conn.execute(
            "INSERT INTO orchestration_steps (id, orchestration_id, name, prompt, status, "
            "sequence, created_at) VALUES (?, ?, 'step', 'p', 'running', 1, ?)",
            (f"{orchestration_id}-step", orchestration_id, NOW),
        )


def column(conn: sqlite3.Connection, sql: str) -> dict[str, object]:
    return dict(conn.execute(sql).fetchall())


def test_reconcile_corrects_everything_a_kill_left_behind(
    conn: sqlite3.Connection, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    killed_mid_session(conn, tmp_path)

    with caplog.at_level(logging.WARNING):
        report = reconcile(conn, LATER)

    assert report == ReconcileReport(
        sessions_idled=2,
        clients_cleared=3,
        input_locks_cleared=1,
        worktrees_stale=1,
        subagents_failed=2,
        orchestrations_failed=1,
    )
    assert column(conn, "SELECT id, status FROM sessions") == {
        "busy": "idle",
        "other": "idle",
        "rest": "idle",
    }
    assert column(conn, "SELECT id, updated_at FROM sessions")["busy"] == LATER
    assert conn.execute("SELECT COUNT(*) FROM connected_clients").fetchone() == (0,)
    assert conn.execute(
        "SELECT COUNT(*) FROM sessions WHERE input_lock_client IS NOT NULL"
    ).fetchone() == (0,)
    assert column(conn, "SELECT id, stale FROM worktrees") == {"present": 0, "gone": 1}
    assert any("gone" in r.message and r.levelno == logging.WARNING for r in caplog.records)
    assert column(conn, "SELECT id, status FROM subagents") == {
        "sub0": "failed",
        "sub1": "failed",
        "sub2": "completed",
        "sub3": "failed",
    }
    assert column(conn, "SELECT id, result_summary FROM subagents")["sub1"] == RESTART_SUMMARY
    assert column(conn, "SELECT id, status FROM orchestrations") == {
        "o-run": "failed",
        "o-done": "completed",
    }
    assert column(conn, "SELECT id, status FROM orchestration_steps") == {
        "o-run-step": "failed",
        "o-done-step": "running",  # a finished orchestration is history, left as recorded
    }


def test_reconcile_twice_changes_nothing_more(conn: sqlite3.Connection, tmp_path: Path) -> None:
    killed_mid_session(conn, tmp_path)
    reconcile(conn, LATER)

    assert reconcile(conn, LATER + 1) == ReconcileReport(0, 0, 0, 1, 0, 0)


def test_a_worktree_whose_directory_came_back_is_no_longer_stale(
    conn: sqlite3.Connection, tmp_path: Path
) -> None:
    killed_mid_session(conn, tmp_path)
    reconcile(conn, LATER)
    (tmp_path / "removed").mkdir()

    assert reconcile(conn, LATER + 1).worktrees_stale == 0
    assert column(conn, "SELECT id, stale FROM worktrees") == {"present": 0, "gone": 0}


def test_reconcile_is_one_transaction(conn: sqlite3.Connection, tmp_path: Path) -> None:
    killed_mid_session(conn, tmp_path)
    # Make the last step fail: everything before it must be rolled back with it.
    conn.execute(
        "CREATE TRIGGER refuse BEFORE UPDATE ON orchestrations "
        "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
    )

    with pytest.raises(sqlite3.IntegrityError, match="disk I/O error"):
        reconcile(conn, LATER)

    assert not conn.in_transaction
    assert column(conn, "SELECT id, status FROM sessions")["busy"] == "active"
    assert conn.execute("SELECT COUNT(*) FROM connected_clients").fetchone() == (3,)
