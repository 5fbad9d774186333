"""Startup reconciliation: undo what an unclean stop left behind.

After a restart no client stream or subagent survives, and no claude process except those kept
by their holders (claude/holder: those sessions stay active), so rows claiming otherwise are
corrected — all in ONE transaction, before any connection is accepted.

A session that was active had a turn cut off: its event log gets an ErrorEvent
(TURN_INTERRUPTED) and a StatusChange(IDLE) under its next event seqs, so a replay ends in the
state the session is really in, not THINKING. Appended in the same transaction that makes the
session idle, they are added exactly once, and live and replayed streams stay identical. Not so
for a session whose permission request is still open (unanswered, or its answer not yet given
to claude): that turn goes on once the request is answered (permissions.orphans), and its log
rightly ends waiting for the user — unless it is the session of a subagent whose run has ended
(failed here, standalone runs do not survive a restart): its questions are withdrawn, never
answered; nor for one whose log already ends IDLE (the turn ended, only the status write
missed the kill).

Nobody holds an input lock after a restart, so a session whose log last gave the lock to a
client gets the InputLockChange that says so (holder: nobody); a replay then shows the lock
as it is, not as it was. That move also settles every RequestInputLock still waiting (its
InputLockRequested PENDING neither KEPT nor followed by a move), as a move does live.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections import Counter
from collections.abc import Collection, Sequence
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
    lock_requests_settled: int  # RequestInputLock waits ended in the log by the restart
    worktrees_stale: int  # worktrees whose directory is missing (flagged, never deleted)
    subagents_failed: int
    orchestrations_resumable: int  # continued by the subagents package once serving


def reconcile(
    conn: sqlite3.Connection, now: float, held: Collection[str] = frozenset()
) -> ReconcileReport:
    """`held`: sessions whose claude outlived the daemon under its holder; their turn goes on."""
    with transaction(conn):
        # First: a subagent's run failed here ends its turn even with a question open.
        subagents_failed = _fail_standalone_subagents(conn, now)
        report = ReconcileReport(
            sessions_idled=_end_interrupted_turns(conn, now, held),
            clients_cleared=conn.execute("DELETE FROM connected_clients").rowcount,
            input_locks_cleared=conn.execute(
                "UPDATE sessions SET input_lock_client = NULL WHERE input_lock_client IS NOT NULL"
            ).rowcount,
            lock_requests_settled=_release_input_locks(conn, now),
            worktrees_stale=_flag_missing_worktrees(conn),
            subagents_failed=subagents_failed,
            orchestrations_resumable=conn.execute(
                "SELECT COUNT(*) FROM orchestrations WHERE status IN ('pending', 'running')"
            ).fetchone()[0],
        )
    log.info("startup reconciliation: %s", report)
    return report


def _fail_standalone_subagents(conn: sqlite3.Connection, now: float) -> int:
    """A subagent spawned on its own does not survive a restart, even when its claude outlived
    the daemon under its holder: before serving, the subagents package ends it as a run ends
    (claude stopped, questions withdrawn). One running a step of an unfinished orchestration
    is resumed with its plan (subagents.orchestrator)."""
    return conn.execute(
        "UPDATE subagents SET status = 'failed', result_summary = ?, error_message = ?, "
        "completed_at = ? WHERE status IN ('pending', 'running') AND (orchestration_id IS NULL "
        "OR orchestration_id NOT IN (SELECT id FROM orchestrations "
        "WHERE status IN ('pending', 'running')))",
        (RESTART_SUMMARY, RESTART_SUMMARY, now),
    ).rowcount


def _end_interrupted_turns(conn: sqlite3.Connection, now: float, held: Collection[str]) -> int:
    """Active sessions → idle, each with the end of its cut-off turn appended to its log
    (unless a permission request of the turn is still open — not in a subagent's session whose
    run has ended: its questions are withdrawn — or its claude still runs)."""
    cut_off = [
        row[0]
        for row in conn.execute(
            "SELECT id FROM sessions WHERE status = 'active' AND (NOT EXISTS (SELECT 1 FROM "
            "pending_permissions p WHERE p.session_id = sessions.id AND p.delivered = 0) "
            "OR id IN (SELECT session_id FROM subagents "
            "WHERE status NOT IN ('pending', 'running')))"
        )
        if row[0] not in held
    ]
    for session_id in cut_off:
        if _log_ends_idle(conn, session_id):
            continue  # the turn ended; only the status row missed the kill
        ending = [
            agent_pb2.AgentEvent(
                error=agent_pb2.ErrorEvent(code=INTERRUPTED_CODE, message=INTERRUPTED_MESSAGE)
            ),
            agent_pb2.AgentEvent(
                status_change=agent_pb2.StatusChange(
                    status=common_pb2.AGENT_STATUS_IDLE, message=INTERRUPTED_MESSAGE
                )
            ),
        ]
        _append_to_log(conn, session_id, ending, now)
        log.warning("session %s was active: its turn was interrupted by the restart", session_id)
    idled = 0
    for (session_id,) in conn.execute("SELECT id FROM sessions WHERE status = 'active'").fetchall():
        if session_id not in held:
            idled += conn.execute(
                "UPDATE sessions SET status = 'idle', updated_at = ? WHERE id = ?",
                (now, session_id),
            ).rowcount
    return idled


def _release_input_locks(conn: sqlite3.Connection, now: float) -> int:
    """Appends the restart's InputLockChange (nobody holds the lock) to every log whose last
    move gave the lock to a client or that has a request still waiting; returns how many
    waiting requests that settled."""
    settled = 0
    for (session_id,) in conn.execute("SELECT id FROM sessions").fetchall():
        last_move, holder = _last_lock_move(conn, session_id)
        waiting = _waiting_lock_requests(conn, session_id, last_move)
        if holder or waiting:
            release = agent_pb2.AgentEvent(input_lock=agent_pb2.InputLockChange())
            _append_to_log(conn, session_id, [release], now)
        if waiting:
            log.warning(
                "session %s: %d input lock request(s) ended by the restart", session_id, waiting
            )
            settled += waiting
    return settled


def _last_lock_move(conn: sqlite3.Connection, session_id: str) -> tuple[int, str]:
    """(seq, holder) of the session's last InputLockChange; (0, "") when there is none."""
    row = conn.execute(
        "SELECT sequence, payload FROM events WHERE session_id = ? AND kind = 'input_lock' "
        "ORDER BY sequence DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    if row is None:
        return 0, ""
    return row[0], agent_pb2.AgentEvent.FromString(row[1]).input_lock.holder_client_id


def _waiting_lock_requests(conn: sqlite3.Connection, session_id: str, last_move: int) -> int:
    """How many InputLockRequested PENDING of the session's log are unsettled: after the
    last InputLockChange (a move settles every request before it), without their KEPT."""
    asked: Counter[tuple[str, str, int]] = Counter()
    kept: Counter[tuple[str, str, int]] = Counter()
    for (payload,) in conn.execute(
        "SELECT payload FROM events "
        "WHERE session_id = ? AND sequence > ? AND kind = 'input_lock_requested'",
        (session_id, last_move),
    ):
        request = agent_pb2.AgentEvent.FromString(payload).input_lock_requested
        # KEPT repeats its request's requester, holder and deadline.
        key = (
            request.requested_by_client_id,
            request.holder_client_id,
            request.request_deadline.ToNanoseconds(),
        )
        if request.state == agent_pb2.INPUT_LOCK_REQUEST_STATE_PENDING:
            asked[key] += 1
        elif request.state == agent_pb2.INPUT_LOCK_REQUEST_STATE_KEPT:
            kept[key] += 1
    return (asked - kept).total()


def _append_to_log(
    conn: sqlite3.Connection, session_id: str, events: Sequence[agent_pb2.AgentEvent], now: float
) -> None:
    """Appends events the daemon makes itself under the session's next event seqs, stamped
    and numbered as a live stream would carry them."""
    (last,) = conn.execute(
        "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE session_id = ?", (session_id,)
    ).fetchone()
    stamp = Timestamp()
    stamp.FromNanoseconds(int(now * 1e9))
    rows = []
    for sequence, event in enumerate(events, start=last + 1):
        event.sequence = sequence
        event.timestamp.CopyFrom(stamp)
        kind = event.WhichOneof("event") or ""
        rows.append(EventRow(session_id, sequence, None, kind, event.SerializeToString(), now))
    conn.executemany(INSERT_EVENT, rows)


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
