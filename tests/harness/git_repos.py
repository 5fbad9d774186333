"""Real git repositories for tests: a bare repository on disk as `origin`, a clone of it
registered with a RepoRegistry on a real database, and helpers to look at both."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

from betcode.config.settings import WorktreeSettings
from betcode.storage import StoreReader, StoreWriter, open_database
from betcode.storage.worktrees import RepoRecord
from betcode.worktrees import RepoChanges, RepoRegistry, WorktreeManager

IDENTITY = ("-c", "user.name=Test", "-c", "user.email=test@example.invalid")


def sh(cwd: Path | str, *args: str) -> str:
    """Run git in `cwd` for the test's own set-up and checks; fails the test on error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(
        ["git", *IDENTITY, "-C", str(cwd), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def commit_file(checkout: Path, name: str, text: str, message: str) -> str:
    (checkout / name).write_text(text)
    sh(checkout, "add", name)
    sh(checkout, "commit", "-q", "-m", message)
    return sh(checkout, "rev-parse", "HEAD").strip()


@dataclass
class GitWorld:
    root: Path
    remote: Path
    repo: Path
    base_dir: Path
    database: Path
    writer: StoreWriter
    reader: StoreReader
    worktrees: WorktreeManager
    repos: RepoRegistry
    record: RepoRecord

    def branches(self) -> set[str]:
        out = sh(self.repo, "for-each-ref", "--format=%(refname:short)", "refs/heads")
        return set(out.split())

    def git_worktrees(self) -> list[str]:
        out = sh(self.repo, "worktree", "list", "--porcelain")
        return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]

    def rows(self, table: str = "worktrees") -> int:
        with sqlite3.connect(self.database) as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    def nothing_left(self, branches_before: set[str]) -> None:
        """No worktree row, no linked worktree, no new branch, no folder under the base."""
        assert self.rows() == 0
        assert self.git_worktrees() == [str(self.repo)]
        assert self.branches() == branches_before
        leftovers = list(self.base_dir.rglob("*")) if self.base_dir.exists() else []
        assert [p for p in leftovers if p.is_file() or not p.is_dir()] == []


def make_repository(root: Path) -> tuple[Path, Path]:
    remote = root / "remote.git"
    sh(root, "init", "-q", "--bare", "-b", "main", str(remote))
    repo = root / "project"
    sh(root, "clone", "-q", str(remote), str(repo))
    sh(repo, "checkout", "-q", "-b", "main")
    commit_file(repo, "README.md", "hello\n", "first")
    (repo / ".gitignore").write_text("*.log\n")
    sh(repo, "add", ".gitignore")
    sh(repo, "commit", "-q", "-m", "ignore logs")
    sh(repo, "push", "-q", "-u", "origin", "main")
    return remote, repo


async def open_world(root: Path, settings: WorktreeSettings | None = None) -> GitWorld:
    remote, repo = make_repository(root)
    base = root / "worktrees"
    database = open_database(root / "daemon.db")
    writer, reader = StoreWriter(database), StoreReader(database)
    manager = WorktreeManager(
        writer, reader, settings or WorktreeSettings(min_free_bytes=0), default_base_dir=base
    )
    repos = RepoRegistry(writer, reader, manager)
    record = await repos.register(str(repo), RepoChanges())
    return GitWorld(
        root, remote, repo.resolve(), base, database.path, writer, reader, manager, repos, record
    )
