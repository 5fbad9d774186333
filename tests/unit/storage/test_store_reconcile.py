"""Startup reconciliation on a database left behind by a daemon killed mid-session."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from store_helpers import NOW, add_session, line_and_events

from betcode.storage import ReconcileReport, reconcile
from betcode.storage.clients import register_client, transfer_input_lock
from betcode.storage.pending import answer, insert_pending
from betcode.storage.reconcile import INTERRUPTED_CODE, RESTART_SUMMARY
from betcode.storage.rows import INSERT_EVENT, INSERT_MESSAGE, MessageRow
from betcode.storage.sessions import update_status
from betcode.storage.subagents import ended_unsettled
from betcode.v1 import agent_pb2, common_pb2

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
    # A step's subagent of a plan still running: resumed with its plan, not failed.
    conn.execute(
        "INSERT INTO subagents (id, parent_session_id, session_id, name, status, prompt, "
        "working_directory, created_at, orchestration_id) "
        "VALUES ('step-sub', 'busy', 'rest', 'step', 'running', 'p', '/', ?, 'o-run')",
        (NOW,),
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
        lock_requests_settled=0,
        worktrees_stale=1,
        subagents_failed=2,
        orchestrations_resumable=1,
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
        "step-sub": "running",
    }
    assert column(conn, "SELECT id, result_summary FROM subagents")["sub1"] == RESTART_SUMMARY
    # What a withdrawn question and a late answer's refusal say of the run.
    assert column(conn, "SELECT id, error_message FROM subagents")["sub1"] == RESTART_SUMMARY
    assert column(conn, "SELECT id, status FROM orchestrations") == {
        "o-run": "running",  # continued by the subagents package once the daemon serves
        "o-done": "completed",
    }
    assert column(conn, "SELECT id, status FROM orchestration_steps") == {
        "o-run-step": "running",
        "o-done-step": "running",  # a finished orchestration is history, left as recorded
    }


def test_runs_ended_with_a_question_unanswered_or_claude_running_are_found_to_end_them(
    conn: sqlite3.Connection,
) -> None:
    """What startup ends as a run's end would have (subagents.manager.end_runs_left_behind)."""
    for n, (status, question) in enumerate(
        (
            ("failed", "unanswered"),  # failed by reconciliation while its question waited
            ("cancelled", "answered"),  # its end settled everything
            ("running", "unanswered"),  # a resumed step: its question stays pending
            ("failed", None),  # listed below as one whose claude runs under its holder
            ("completed", None),
        )
    ):
        add_session(conn, f"s{n}")
        conn.execute(
            "INSERT INTO subagents (id, parent_session_id, session_id, name, status, prompt, "
            "working_directory, created_at, completed_at) "
            "VALUES (?, 's0', ?, 'helper', ?, 'p', '/', ?, ?)",
            (f"sub{n}", f"s{n}", status, NOW, NOW + n),
        )
        if question is not None:
            insert_pending(
                conn,
                request_id=f"r{n}",
                session_id=f"s{n}",
                tool_name="Bash",
                input_json="{}",
                dialect="stdio",
                received_at=NOW,
                expires_at=LATER,
            )
            if question == "answered":
                answer(conn, f"r{n}", decision="cancelled", payload="{}", now=NOW)

    found = ended_unsettled(conn, running_sessions=["s2", "s3"])

    assert [row.id for row in found] == ["sub0", "sub3"]


def test_reconcile_twice_changes_nothing_more(conn: sqlite3.Connection, tmp_path: Path) -> None:
    killed_mid_session(conn, tmp_path)
    reconcile(conn, LATER)

    assert reconcile(conn, LATER + 1) == ReconcileReport(
        sessions_idled=0,
        clients_cleared=0,
        input_locks_cleared=0,
        lock_requests_settled=0,
        worktrees_stale=1,
        subagents_failed=0,
        orchestrations_resumable=1,
    )


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
    # Make a late step (failing the subagents) fail: everything before it must roll back too.
    conn.execute(
        "CREATE TRIGGER refuse BEFORE UPDATE ON subagents "
        "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
    )

    with pytest.raises(sqlite3.IntegrityError, match="disk I/O error"):
        reconcile(conn, LATER)

    assert not conn.in_transaction
    assert column(conn, "SELECT id, status FROM sessions")["busy"] == "active"
    assert conn.execute("SELECT COUNT(*) FROM connected_clients").fetchone() == (3,)


def test_an_interrupted_turn_is_ended_in_the_log_once(
    conn: sqlite3.Connection, tmp_path: Path
) -> None:
    killed_mid_session(conn, tmp_path)
    for row in line_and_events("busy", 1, 1, events=3):  # "busy" was mid-turn: events 1-3
        conn.execute(INSERT_MESSAGE if isinstance(row, MessageRow) else INSERT_EVENT, row)
    # "done" finished its turn; the kill only beat the write of its status.
    add_session(conn, "done")
    update_status(conn, "done", "active", NOW)
    idle = agent_pb2.AgentEvent(
        status_change=agent_pb2.StatusChange(status=common_pb2.AGENT_STATUS_IDLE)
    )
    conn.execute(INSERT_EVENT, ("done", 1, None, "status_change", idle.SerializeToString(), NOW))
    # "asking" waits for a permission answer: its turn goes on once it is answered.
    add_session(conn, "asking")
    update_status(conn, "asking", "active", NOW)
    conn.execute(
        "INSERT INTO pending_permissions (request_id, session_id, tool_name, input, dialect, "
        "received_at, expires_at) VALUES ('r1', 'asking', 'Bash', '{}', 'cli', ?, ?)",
        (NOW, NOW + 60),
    )
    # So does a standalone subagent's, but its run fails here: its question is withdrawn, its
    # turn never goes on.
    add_session(conn, "sub-asking")
    update_status(conn, "sub-asking", "active", NOW)
    conn.execute(
        "INSERT INTO subagents (id, parent_session_id, session_id, name, status, prompt, "
        "working_directory, created_at) VALUES ('sub', 'busy', 'sub-asking', 'h', 'running', "
        "'p', '/', ?)",
        (NOW,),
    )
    conn.execute(
        "INSERT INTO pending_permissions (request_id, session_id, tool_name, input, dialect, "
        "received_at, expires_at) VALUES ('r2', 'sub-asking', 'Bash', '{}', 'cli', ?, ?)",
        (NOW, NOW + 60),
    )

    reconcile(conn, LATER)
    reconcile(conn, LATER + 1)  # a second restart adds nothing

    def log_of(session_id: str) -> list[tuple[int, int | None, str, agent_pb2.AgentEvent]]:
        rows = conn.execute(
            "SELECT sequence, message_sequence, kind, payload FROM events "
            "WHERE session_id = ? AND sequence > 3 ORDER BY sequence",
            (session_id,),
        )
        return [(s, m, k, agent_pb2.AgentEvent.FromString(p)) for s, m, k, p in rows]

    (error_seq, _, error_kind, error), (status_seq, source, status_kind, status) = log_of("busy")
    assert (error_seq, status_seq, source) == (4, 5, None)  # next seqs, daemon events
    assert (error_kind, status_kind) == ("error", "status_change")
    assert (error.sequence, status.sequence) == (4, 5)  # as a live stream would carry them
    assert error.error.code == INTERRUPTED_CODE
    assert "turn interrupted by a daemon restart" in error.error.message
    assert status.status_change.status == common_pb2.AGENT_STATUS_IDLE
    assert status.timestamp.seconds == int(LATER)
    # An active session with no events yet starts its log at 1; an idle one gets nothing.
    assert [seq for seq, *_ in log_of("other")] == []
    first = conn.execute("SELECT sequence FROM events WHERE session_id = 'other'").fetchall()
    assert first == [(1,), (2,)]
    ended = conn.execute("SELECT kind FROM events WHERE session_id = 'sub-asking'").fetchall()
    assert ended == [("error",), ("status_change",)]
    for untouched, events in (("rest", 0), ("asking", 0), ("done", 1)):
        count = conn.execute("SELECT COUNT(*) FROM events WHERE session_id = ?", (untouched,))
        assert count.fetchone() == (events,)
        assert column(conn, "SELECT id, status FROM sessions")[untouched] == "idle"
