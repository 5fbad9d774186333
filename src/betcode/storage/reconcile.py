"""Startup reconciliation (DIGEST REC-02): undo what an unclean stop left behind.

After a restart no claude process, client stream or subagent survives, so rows claiming
otherwise are corrected — all in ONE transaction, before any connection is accepted.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass

from betcode.storage.database import transaction

log = logging.getLogger(__name__)

RESTART_SUMMARY = "daemon restarted"


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    sessions_idled: int  # active → idle (the next message resumes with --resume)
    clients_cleared: int
    input_locks_cleared: int
    worktrees_stale: int  # worktrees whose directory is missing (flagged, never deleted)
    subagents_failed: int
    orchestrations_failed: int


def reconcile(conn: sqlite3.Connection, now: float) -> ReconcileReport:
    with transaction(conn):
        report = ReconcileReport(
            sessions_idled=conn.execute(
                "UPDATE sessions SET status = 'idle', updated_at = ? WHERE status = 'active'",
                (now,),
            ).rowcount,
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
