"""Startup reconciliation (DIGEST REC-02): undo what an unclean stop left behind.

After a restart no claude process, client stream or subagent survives, so rows claiming
otherwise are corrected — all in ONE transaction, before any connection is accepted.

A session that was active had a turn cut off: its event log gets an ErrorEvent
(TURN_INTERRUPTED) and a StatusChange(IDLE) under its next event seqs, so a replay ends in the
state the session is really in, not THINKING. Appended in the same transaction that makes the
session idle, they are added exactly once, and live and replayed streams stay identical. Not so
for a session whose permission request is still open (unanswered, or its answer not yet given
to claude): that turn goes on once the request is answered (permissions.orphans), and its log
rightly ends waiting for the user; nor for one whose log already ends IDLE (the turn ended,
only the status write missed the kill).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from betcode.storage.database import transaction
from betcode.storage.rows import INSERT_EVENT, EventRow
from betcode.v1 import agent_pb2, common_pb2

log = logging.getLogger(__name__)

RESTART_SUMMARY = "daemon restarted"
INTERRUPTED_CODE = "TURN_INTERRUPTED"
INTERRUPTED_MESSAGE = "turn interrupted by a daemon restart; send a message to continue"


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    sessions_idled: int  # active → idle, turn ended in the log (the next message resumes)
    clients_cleared: int
    input_locks_cleared: int
    worktrees_stale: int  # worktrees whose directory is missing (flagged, never deleted)
    subagents_failed: int
    orchestrations_failed: int


def reconcile(conn: sqlite3.Connection, now: float) -> ReconcileReport:
    with transaction(conn):
        report = ReconcileReport(
            sessions_idled=_end_interrupted_turns(conn, now),
            clients_cleared=conn.execute("DELETE FROM connected_clients").rowcount,
            input_locks_cleared=conn.execute(
                "UPDATE sessions SET input_lock_client = NULL WHERE input_lock_client IS NOT NULL"
            ).rowcount,
            worktrees_stale=_flag_missing_worktrees(conn),
            subagents_failed=conn.execute(
                "UPDATE subagents SET status = 'failed', result_summary = ?, completed_at = ? "
                "WHERE status IN ('pending', 'running')",
                (RESTART_SUMMARY, now),
            ).rowcount,
            orchestrations_failed=_fail_unfinished_orchestrations(conn, now),
        )
    log.info("startup reconciliation: %s", report)
    return report


def _end_interrupted_turns(conn: sqlite3.Connection, now: float) -> int:
    """Active sessions → idle, each with the end of its cut-off turn appended to its log
    (unless a permission request of the turn is still open)."""
    cut_off = [
        row[0]
        for row in conn.execute(
            "SELECT id FROM sessions WHERE status = 'active' AND NOT EXISTS (SELECT 1 FROM "
            "pending_permissions p WHERE p.session_id = sessions.id AND p.delivered = 0)"
        )
    ]
    stamp = Timestamp()
    stamp.FromNanoseconds(int(now * 1e9))
    ending = (
        agent_pb2.AgentEvent(
            error=agent_pb2.ErrorEvent(code=INTERRUPTED_CODE, message=INTERRUPTED_MESSAGE),
            timestamp=stamp,
        ),
        agent_pb2.AgentEvent(
            status_change=agent_pb2.StatusChange(
                status=common_pb2.AGENT_STATUS_IDLE, message=INTERRUPTED_MESSAGE
            ),
            timestamp=stamp,
        ),
    )
    for session_id in cut_off:
        if _log_ends_idle(conn, session_id):
            continue  # the turn ended; only the status row missed the kill
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE session_id = ?", (session_id,)
        ).fetchone()
        rows = []
        for offset, event in enumerate(ending, start=1):
            event.sequence = last + offset
            kind = event.WhichOneof("event") or ""
            rows.append(
                EventRow(session_id, last + offset, None, kind, event.SerializeToString(), now)
            )
        conn.executemany(INSERT_EVENT, rows)
        log.warning("session %s was active: its turn was interrupted by the restart", session_id)
    return conn.execute(
        "UPDATE sessions SET status = 'idle', updated_at = ? WHERE status = 'active'", (now,)
    ).rowcount


def _log_ends_idle(conn: sqlite3.Connection, session_id: str) -> bool:
    row = conn.execute(
        "SELECT payload FROM events WHERE session_id = ? AND kind = 'status_change' "
        "ORDER BY sequence DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    if row is None:
        return False
    status = agent_pb2.AgentEvent.FromString(row[0]).status_change.status
    return bool(status == common_pb2.AGENT_STATUS_IDLE)


def _flag_missing_worktrees(conn: sqlite3.Connection) -> int:
    """Set `stale` from whether each worktree's directory exists; return how many are stale."""
    stale = 0
    for worktree_id, name, path in conn.execute("SELECT id, name, path FROM worktrees").fetchall():
        missing = not os.path.isdir(path)
        if missing:
            stale += 1
            log.warning(
                "worktree %s (%s) is stale: its directory %s is missing", name, worktree_id, path
            )
        conn.execute("UPDATE worktrees SET stale = ? WHERE id = ?", (int(missing), worktree_id))
    return stale


def _fail_unfinished_orchestrations(conn: sqlite3.Connection, now: float) -> int:
    conn.execute(
        "UPDATE orchestration_steps SET status = 'failed', completed_at = ? "
        "WHERE status IN ('pending', 'running') AND orchestration_id IN "
        "(SELECT id FROM orchestrations WHERE status IN ('pending', 'running'))",
        (now,),
    )
    return conn.execute(
        "UPDATE orchestrations SET status = 'failed', completed_at = ? "
        "WHERE status IN ('pending', 'running')",
        (now,),
    ).rowcount
