"""The `git_repos`, `worktrees` and `worktree_rescues` tables.

Every function takes a connection; writes belong on the writer thread (`StoreWriter.call`),
reads on a reader connection (`StoreReader.read`). A worktree's runtime figures (how many
sessions, when last active) are computed from `sessions` at read time, so they never drift.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Literal

WorktreeMode = Literal["global", "local", "custom"]
SetupStatus = Literal["none", "succeeded", "failed", "timeout"]


@dataclass(frozen=True, slots=True)
class RepoRecord:
    id: str
    name: str
    repo_path: str
    worktree_mode: WorktreeMode
    local_subfolder: str
    custom_path: str | None
    setup_script: str | None
    auto_gitignore: bool
    created_at: float
    last_active: float
    worktree_count: int


@dataclass(frozen=True, slots=True)
class WorktreeRecord:
    id: str
    name: str
    path: str
    branch: str
    repo_path: str
    repo_id: str | None
    base_branch: str | None
    branch_created: bool
    setup_script: str | None
    setup_status: SetupStatus
    setup_error: str | None
    stale: bool  # its directory was found missing
    created_at: float
    last_active: float  # the latest of the row's own and its sessions' activity
    session_count: int


@dataclass(frozen=True, slots=True)
class RescueRecord:
    id: str
    repo_path: str
    worktree_name: str
    worktree_path: str
    branch: str
    ref: str
    head_commit: str
    work_commit: str | None
    at_risk: list[str]
    created_at: float


_REPO_SELECT = (
    "SELECT id, name, repo_path, worktree_mode, local_subfolder, custom_path, setup_script, "
    "auto_gitignore, created_at, last_active, "
    "(SELECT COUNT(*) FROM worktrees WHERE worktrees.repo_id = git_repos.id) FROM git_repos"
)
_WORKTREE_SELECT = (
    "SELECT id, name, path, branch, repo_path, repo_id, base_branch, branch_created, "
    "setup_script, setup_status, setup_error, stale, created_at, "
    "MAX(last_active, COALESCE((SELECT MAX(updated_at) FROM sessions "
    "WHERE sessions.worktree_id = worktrees.id), 0)), "
    "(SELECT COUNT(*) FROM sessions WHERE sessions.worktree_id = worktrees.id) FROM worktrees"
)
_RESCUE_SELECT = (
    "SELECT id, repo_path, worktree_name, worktree_path, branch, ref, head_commit, work_commit, "
    "at_risk, created_at FROM worktree_rescues"
)


def _repo(row: sqlite3.Row | tuple[object, ...]) -> RepoRecord:
    values = list(row)
    values[7] = bool(values[7])
    return RepoRecord(*values)


def _worktree(row: sqlite3.Row | tuple[object, ...]) -> WorktreeRecord:
    values = list(row)
    values[7] = bool(values[7])
    values[11] = bool(values[11])
    return WorktreeRecord(*values)


def _rescue(row: sqlite3.Row | tuple[object, ...]) -> RescueRecord:
    values = list(row)
    values[8] = json.loads(str(values[8]))
    return RescueRecord(*values)


# ---- repositories ----


def insert_repo(conn: sqlite3.Connection, repo: RepoRecord) -> bool:
    """False (and nothing written) when the path is registered already."""
    cursor = conn.execute(
        "INSERT OR IGNORE INTO git_repos (id, name, repo_path, worktree_mode, local_subfolder,"
        " custom_path, setup_script, auto_gitignore, created_at, last_active) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            repo.id,
            repo.name,
            repo.repo_path,
            repo.worktree_mode,
            repo.local_subfolder,
            repo.custom_path,
            repo.setup_script,
            int(repo.auto_gitignore),
            repo.created_at,
            repo.last_active,
        ),
    )
    return cursor.rowcount > 0


def update_repo(conn: sqlite3.Connection, repo: RepoRecord) -> None:
    conn.execute(
        "UPDATE git_repos SET name = ?, worktree_mode = ?, local_subfolder = ?, custom_path = ?,"
        " setup_script = ?, auto_gitignore = ? WHERE id = ?",
        (
            repo.name,
            repo.worktree_mode,
            repo.local_subfolder,
            repo.custom_path,
            repo.setup_script,
            int(repo.auto_gitignore),
            repo.id,
        ),
    )


def get_repo(conn: sqlite3.Connection, repo_id: str) -> RepoRecord | None:
    row = conn.execute(f"{_REPO_SELECT} WHERE id = ?", (repo_id,)).fetchone()
    return None if row is None else _repo(row)


def find_repo_by_path(conn: sqlite3.Connection, repo_path: str) -> RepoRecord | None:
    row = conn.execute(f"{_REPO_SELECT} WHERE repo_path = ?", (repo_path,)).fetchone()
    return None if row is None else _repo(row)


def list_repos(
    conn: sqlite3.Connection, *, limit: int | None = None, offset: int = 0
) -> tuple[list[RepoRecord], int]:
    """A page of repositories by name, and how many there are in all."""
    total = int(conn.execute("SELECT COUNT(*) FROM git_repos").fetchone()[0])
    rows = conn.execute(
        f"{_REPO_SELECT} ORDER BY name, id LIMIT ? OFFSET ?",
        (-1 if limit is None else limit, offset),
    ).fetchall()
    return [_repo(row) for row in rows], total


def delete_repo(conn: sqlite3.Connection, repo_id: str) -> bool:
    return conn.execute("DELETE FROM git_repos WHERE id = ?", (repo_id,)).rowcount > 0


# ---- worktrees ----


def insert_worktree(conn: sqlite3.Connection, worktree: WorktreeRecord) -> None:
    conn.execute(
        "INSERT INTO worktrees (id, name, path, branch, repo_path, repo_id, base_branch,"
        " branch_created, setup_script, setup_status, setup_error, stale, created_at, last_active)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            worktree.id,
            worktree.name,
            worktree.path,
            worktree.branch,
            worktree.repo_path,
            worktree.repo_id,
            worktree.base_branch,
            int(worktree.branch_created),
            worktree.setup_script,
            worktree.setup_status,
            worktree.setup_error,
            int(worktree.stale),
            worktree.created_at,
            worktree.last_active,
        ),
    )
    if worktree.repo_id is not None:
        conn.execute(
            "UPDATE git_repos SET last_active = ? WHERE id = ?",
            (worktree.created_at, worktree.repo_id),
        )


def get_worktree(conn: sqlite3.Connection, worktree_id: str) -> WorktreeRecord | None:
    row = conn.execute(f"{_WORKTREE_SELECT} WHERE id = ?", (worktree_id,)).fetchone()
    return None if row is None else _worktree(row)


def find_worktree_by_name(
    conn: sqlite3.Connection, name: str, repo_id: str | None = None
) -> list[WorktreeRecord]:
    """Worktrees called `name` (in one repository, or in any)."""
    if repo_id is None:
        rows = conn.execute(f"{_WORKTREE_SELECT} WHERE name = ?", (name,)).fetchall()
    else:
        rows = conn.execute(
            f"{_WORKTREE_SELECT} WHERE name = ? AND repo_id = ?", (name, repo_id)
        ).fetchall()
    return [_worktree(row) for row in rows]


def find_worktree_by_path(conn: sqlite3.Connection, path: str) -> WorktreeRecord | None:
    row = conn.execute(f"{_WORKTREE_SELECT} WHERE path = ?", (path,)).fetchone()
    return None if row is None else _worktree(row)


def list_worktrees(conn: sqlite3.Connection, repo_id: str | None = None) -> list[WorktreeRecord]:
    if repo_id is None:
        rows = conn.execute(f"{_WORKTREE_SELECT} ORDER BY created_at, id").fetchall()
    else:
        rows = conn.execute(
            f"{_WORKTREE_SELECT} WHERE repo_id = ? ORDER BY created_at, id", (repo_id,)
        ).fetchall()
    return [_worktree(row) for row in rows]


def set_stale(conn: sqlite3.Connection, worktree_ids: list[str]) -> None:
    conn.executemany("UPDATE worktrees SET stale = 1 WHERE id = ?", [(i,) for i in worktree_ids])


def delete_worktree(conn: sqlite3.Connection, worktree_id: str) -> bool:
    return conn.execute("DELETE FROM worktrees WHERE id = ?", (worktree_id,)).rowcount > 0


def open_approvals(conn: sqlite3.Connection, worktree_id: str) -> int:
    """Permission requests of the worktree's sessions that still wait for an answer."""
    row = conn.execute(
        "SELECT COUNT(*) FROM pending_permissions p JOIN sessions s ON s.id = p.session_id "
        "WHERE s.worktree_id = ? AND p.response_received = 0",
        (worktree_id,),
    ).fetchone()
    return int(row[0])


# ---- rescues ----


def insert_rescue(conn: sqlite3.Connection, rescue: RescueRecord) -> None:
    conn.execute(
        "INSERT INTO worktree_rescues (id, repo_path, worktree_name, worktree_path, branch, ref,"
        " head_commit, work_commit, at_risk, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            rescue.id,
            rescue.repo_path,
            rescue.worktree_name,
            rescue.worktree_path,
            rescue.branch,
            rescue.ref,
            rescue.head_commit,
            rescue.work_commit,
            json.dumps(rescue.at_risk),
            rescue.created_at,
        ),
    )


def list_rescues(conn: sqlite3.Connection) -> list[RescueRecord]:
    return [_rescue(row) for row in conn.execute(f"{_RESCUE_SELECT} ORDER BY created_at, id")]


def get_rescue(conn: sqlite3.Connection, rescue_id: str) -> RescueRecord | None:
    row = conn.execute(f"{_RESCUE_SELECT} WHERE id = ?", (rescue_id,)).fetchone()
    return None if row is None else _rescue(row)
