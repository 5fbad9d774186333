"""The `subagents`, `orchestrations` and `orchestration_steps` tables.

Every function takes a connection; writes belong on the writer thread (`StoreWriter.call`),
reads on a reader connection. JSON columns (allowed_tools, depends_on, options) are decoded
here, so callers see lists and dicts.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

SubagentStatus = Literal["pending", "running", "completed", "failed", "cancelled"]
StepStatus = Literal["pending", "running", "completed", "failed", "blocked"]
OrchestrationStatus = Literal["pending", "running", "completed", "failed"]
UNFINISHED = ("pending", "running")


@dataclass(frozen=True, slots=True)
class SubagentRow:
    id: str
    parent_session_id: str
    session_id: str
    name: str
    status: SubagentStatus
    prompt: str
    model: str
    working_directory: str
    allowed_tools: list[str]
    auto_approve: bool
    max_turns: int
    result_summary: str | None
    exit_code: int | None
    created_at: float
    started_at: float | None
    completed_at: float | None
    orchestration_id: str | None
    step_id: str | None
    options: dict[str, Any]
    error_message: str | None


_SUBAGENT_COLUMNS = (
    "id, parent_session_id, session_id, name, status, prompt, COALESCE(model, ''), "
    "working_directory, allowed_tools, auto_approve_permissions, max_turns, result_summary, "
    "exit_code, created_at, started_at, completed_at, orchestration_id, step_id, options, "
    "error_message"
)


def _subagent(row: tuple[Any, ...]) -> SubagentRow:
    values = list(row)
    values[8] = json.loads(values[8])
    values[9] = bool(values[9])
    values[18] = json.loads(values[18])
    return SubagentRow(*values)


def insert_subagent(conn: sqlite3.Connection, row: SubagentRow) -> None:
    conn.execute(
        "INSERT INTO subagents (id, parent_session_id, session_id, name, status, prompt, model, "
        "working_directory, allowed_tools, auto_approve_permissions, max_turns, created_at, "
        "orchestration_id, step_id, options) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row.id,
            row.parent_session_id,
            row.session_id,
            row.name,
            row.status,
            row.prompt,
            row.model or None,
            row.working_directory,
            json.dumps(row.allowed_tools),
            int(row.auto_approve),
            row.max_turns,
            row.created_at,
            row.orchestration_id,
            row.step_id,
            json.dumps(row.options),
        ),
    )


def set_subagent_status(
    conn: sqlite3.Connection,
    subagent_id: str,
    status: SubagentStatus,
    now: float,
    *,
    result_summary: str | None = None,
    exit_code: int | None = None,
    error_message: str | None = None,
) -> bool:
    """Moves an unfinished subagent to `status`; False if it had already finished."""
    args: list[object]
    if status == "running":
        sql, args = "started_at = ?", [now]
    elif status == "pending":
        sql, args = "started_at = NULL", []
    else:
        sql = "completed_at = ?, result_summary = ?, exit_code = ?, error_message = ?"
        args = [now, result_summary, exit_code, error_message]
    changed = conn.execute(
        f"UPDATE subagents SET status = ?, {sql} WHERE id = ? AND status IN ('pending', 'running')",
        [status, *args, subagent_id],
    ).rowcount
    return bool(changed)


def get_subagent(conn: sqlite3.Connection, subagent_id: str) -> SubagentRow | None:
    row = conn.execute(
        f"SELECT {_SUBAGENT_COLUMNS} FROM subagents WHERE id = ?", (subagent_id,)
    ).fetchone()
    return None if row is None else _subagent(row)


def list_subagents(
    conn: sqlite3.Connection, parent_session_id: str | None = None, status: str | None = None
) -> list[SubagentRow]:
    where, args = [], []
    if parent_session_id:
        where.append("parent_session_id = ?")
        args.append(parent_session_id)
    if status:
        where.append("status = ?")
        args.append(status)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(
        f"SELECT {_SUBAGENT_COLUMNS} FROM subagents{clause} ORDER BY created_at, id", args
    ).fetchall()
    return [_subagent(row) for row in rows]


def spawned_since(conn: sqlite3.Connection, parent_session_id: str, since: float) -> int:
    row = conn.execute(
        "SELECT COUNT(*) FROM subagents WHERE parent_session_id = ? AND created_at >= ? "
        "AND orchestration_id IS NULL",
        (parent_session_id, since),
    ).fetchone()
    return int(row[0])


def parent_of_session(conn: sqlite3.Connection, session_id: str) -> SubagentRow | None:
    """The subagent whose own session is `session_id` (None for an ordinary session)."""
    row = conn.execute(
        f"SELECT {_SUBAGENT_COLUMNS} FROM subagents WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else _subagent(row)


def ended_unsettled(
    conn: sqlite3.Connection, running_sessions: Collection[str]
) -> list[SubagentRow]:
    """Subagents whose run has ended but whose session still has an unanswered question, or
    is one of `running_sessions` (its claude runs): what a run's end settles, left behind by a
    daemon stopped before it (startup reconciliation fails such runs)."""
    found = conn.execute(
        f"SELECT {_SUBAGENT_COLUMNS} FROM subagents WHERE status NOT IN ('pending', 'running') "
        "AND (session_id IN (SELECT session_id FROM pending_permissions "
        "WHERE response_received = 0) OR session_id IN (SELECT value FROM json_each(?))) "
        "ORDER BY completed_at, id",
        (json.dumps(list(running_sessions)),),
    )
    return [_subagent(row) for row in found]


# ---- orchestrations ----


@dataclass(frozen=True, slots=True)
class StepRow:
    step_key: str
    name: str
    prompt: str
    model: str
    working_directory: str
    allowed_tools: list[str]
    depends_on: list[str]
    auto_approve: bool
    status: StepStatus
    subagent_id: str | None
    result_summary: str | None
    error_message: str | None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OrchestrationRow:
    id: str
    parent_session_id: str
    strategy: str
    status: OrchestrationStatus
    total_steps: int
    completed_steps: int
    failed_steps: int
    created_at: float
    completed_at: float | None
    error_message: str | None
    steps: list[StepRow]


def insert_orchestration(
    conn: sqlite3.Connection,
    orchestration_id: str,
    parent_session_id: str,
    strategy: str,
    steps: list[StepRow],
    now: float,
) -> None:
    conn.execute(
        "INSERT INTO orchestrations (id, parent_session_id, strategy, status, total_steps, "
        "created_at) VALUES (?, ?, ?, 'running', ?, ?)",
        (orchestration_id, parent_session_id, strategy, len(steps), now),
    )
    conn.executemany(
        "INSERT INTO orchestration_steps (id, orchestration_id, step_key, name, prompt, model, "
        "working_directory, allowed_tools, depends_on, auto_approve_permissions, status, "
        "sequence, created_at, options) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
        [
            (
                f"{orchestration_id}/{index}",
                orchestration_id,
                step.step_key,
                step.name,
                step.prompt,
                step.model or None,
                step.working_directory or None,
                json.dumps(step.allowed_tools),
                json.dumps(step.depends_on),
                int(step.auto_approve),
                index,
                now,
                json.dumps(step.options),
            )
            for index, step in enumerate(steps)
        ],
    )


def set_step(
    conn: sqlite3.Connection,
    orchestration_id: str,
    step_key: str,
    status: StepStatus,
    now: float,
    *,
    subagent_id: str | None = None,
    result_summary: str | None = None,
    error_message: str | None = None,
) -> None:
    completed_at = None if status in UNFINISHED else now
    conn.execute(
        "UPDATE orchestration_steps SET status = ?, completed_at = ?, "
        "subagent_id = COALESCE(?, subagent_id), result_summary = COALESCE(?, result_summary), "
        "error_message = COALESCE(?, error_message) WHERE orchestration_id = ? AND step_key = ?",
        (
            status,
            completed_at,
            subagent_id,
            result_summary,
            error_message,
            orchestration_id,
            step_key,
        ),
    )


def finish_orchestration(
    conn: sqlite3.Connection,
    orchestration_id: str,
    status: OrchestrationStatus,
    completed: int,
    failed: int,
    now: float,
    error_message: str | None = None,
) -> None:
    conn.execute(
        "UPDATE orchestrations SET status = ?, completed_steps = ?, failed_steps = ?, "
        "completed_at = ?, error_message = ? WHERE id = ?",
        (status, completed, failed, now, error_message, orchestration_id),
    )


def get_orchestration(conn: sqlite3.Connection, orchestration_id: str) -> OrchestrationRow | None:
    row = conn.execute(
        "SELECT id, parent_session_id, strategy, status, total_steps, completed_steps, "
        "failed_steps, created_at, completed_at, error_message FROM orchestrations WHERE id = ?",
        (orchestration_id,),
    ).fetchone()
    if row is None:
        return None
    steps = conn.execute(
        "SELECT step_key, name, prompt, COALESCE(model, ''), COALESCE(working_directory, ''), "
        "COALESCE(allowed_tools, '[]'), COALESCE(depends_on, '[]'), auto_approve_permissions, "
        "status, subagent_id, result_summary, error_message, options FROM orchestration_steps "
        "WHERE orchestration_id = ? ORDER BY sequence",
        (orchestration_id,),
    ).fetchall()
    return OrchestrationRow(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        row[3],
        int(row[4]),
        int(row[5]),
        int(row[6]),
        float(row[7]),
        row[8],
        row[9],
        [
            StepRow(
                s[0],
                s[1],
                s[2],
                s[3],
                s[4],
                json.loads(s[5]),
                json.loads(s[6]),
                bool(s[7]),
                s[8],
                s[9],
                s[10],
                s[11],
                json.loads(s[12]),
            )
            for s in steps
        ],
    )


def unfinished_orchestrations(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT id FROM orchestrations WHERE status IN ('pending', 'running') ORDER BY created_at"
    ).fetchall()
    return [str(r[0]) for r in rows]


def last_turn_result(conn: sqlite3.Connection, session_id: str) -> dict[str, Any] | None:
    """claude's `result` line, if one came after the session's last user message: a turn that
    finished although the daemon never saw the step through (killed in between)."""
    row = conn.execute(
        "SELECT payload FROM messages WHERE session_id = ? AND direction = 'out' "
        "AND message_type = 'result' AND sequence > COALESCE((SELECT MAX(sequence) FROM "
        "messages WHERE session_id = ? AND direction = 'in' AND message_type = 'user'), 0) "
        "ORDER BY sequence DESC LIMIT 1",
        (session_id, session_id),
    ).fetchone()
    if row is None:
        return None
    try:
        value = json.loads(row[0])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def subagents_of_orchestration(
    conn: sqlite3.Connection, orchestration_id: str
) -> list[SubagentRow]:
    rows = conn.execute(
        f"SELECT {_SUBAGENT_COLUMNS} FROM subagents WHERE orchestration_id = ? ORDER BY created_at",
        (orchestration_id,),
    ).fetchall()
    return [_subagent(row) for row in rows]


def list_orchestrations(
    conn: sqlite3.Connection, parent_session_id: str = ""
) -> list[OrchestrationRow]:
    """Every orchestration (or `parent_session_id`'s), newest first."""
    where, params = (
        ("WHERE parent_session_id = ?", (parent_session_id,)) if parent_session_id else ("", ())
    )
    ids = conn.execute(
        f"SELECT id FROM orchestrations {where} ORDER BY created_at DESC", params
    ).fetchall()
    found = (get_orchestration(conn, str(row[0])) for row in ids)
    return [row for row in found if row is not None]


@dataclass(frozen=True, slots=True)
class StepPlace:
    """Where a started step runs: its subagent's session, directory and worktree."""

    session_id: str
    working_directory: str
    worktree_id: str
    worktree_name: str
    branch: str


def step_places(conn: sqlite3.Connection, orchestration_id: str) -> dict[str, StepPlace]:
    """Each started step's place, by step key (a step not started yet has none)."""
    rows = conn.execute(
        "SELECT os.step_key, sa.session_id, COALESCE(s.working_directory, ''), "
        "COALESCE(s.worktree_id, ''), COALESCE(w.name, ''), COALESCE(w.branch, '') "
        "FROM orchestration_steps AS os JOIN subagents AS sa ON sa.id = os.subagent_id "
        "LEFT JOIN sessions AS s ON s.id = sa.session_id "
        "LEFT JOIN worktrees AS w ON w.id = s.worktree_id WHERE os.orchestration_id = ?",
        (orchestration_id,),
    ).fetchall()
    return {str(r[0]): StepPlace(str(r[1]), r[2], r[3], r[4], r[5]) for r in rows}


def reset_steps(
    conn: sqlite3.Connection, orchestration_id: str, step_keys: Collection[str]
) -> None:
    """A retry: `step_keys` pending again, their earlier subagents no longer the steps' (kept,
    as history, in the orchestration), and the orchestration running again."""
    marks = ", ".join("?" * len(step_keys))
    conn.execute(
        "UPDATE orchestration_steps SET status = 'pending', completed_at = NULL, "
        "subagent_id = NULL, result_summary = NULL, error_message = NULL "
        f"WHERE orchestration_id = ? AND step_key IN ({marks})",
        (orchestration_id, *step_keys),
    )
    conn.execute(
        f"UPDATE subagents SET step_id = NULL WHERE orchestration_id = ? AND step_id IN ({marks})",
        (orchestration_id, *step_keys),
    )
    conn.execute(
        "UPDATE orchestrations SET status = 'running', completed_at = NULL, error_message = NULL, "
        "failed_steps = (SELECT COUNT(*) FROM orchestration_steps WHERE orchestration_id = ? "
        "AND status IN ('failed', 'blocked')) WHERE id = ?",
        (orchestration_id, orchestration_id),
    )
