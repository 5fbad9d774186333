"""Worktree operations on real repositories (issue 13).

    .venv/bin/python benchmarks/bench_worktrees.py [--quick] [--json]

* create + remove of a worktree in a repository of 10,000 files (100 folders of 100 files): each
  create runs every WT-09 check, `git worktree add` and the row insert; each remove runs the
  safety analysis (status, unreachable commits, approvals), `git worktree remove` and the
  branch deletion. Also the analysis alone (what `worktree get` shows).
* list of 100 worktrees with their runtime status (directory present, session count and last
  activity from 300 sessions), as `ListWorktrees` computes it.

Figures are printed, never asserted; `--json` ends the output with one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path

from betcode.config.settings import WorktreeSettings
from betcode.storage import StoreReader, StoreWriter, open_database
from betcode.storage.sessions import create_session
from betcode.worktrees import RepoChanges, RepoRegistry, WorktreeManager
from betcode.worktrees.git import git_ok

IDENTITY = ("-c", "user.name=Bench", "-c", "user.email=bench@example.invalid")


def git(cwd: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(
        ["git", *IDENTITY, "-C", str(cwd), *args], check=True, env=env, capture_output=True
    )


def make_repo(path: Path, folders: int, files_per_folder: int) -> None:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    line = "x = 1  # a line of source to give each file some size\n"
    for folder in range(folders):
        directory = path / f"pkg{folder:03d}"
        directory.mkdir()
        for number in range(files_per_folder):
            (directory / f"mod{number:03d}.py").write_text(line * 4)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "many files")


async def timed(action: Awaitable[object]) -> float:
    began = time.perf_counter()
    await action
    return (time.perf_counter() - began) * 1000


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered), 1),
        "min_ms": round(ordered[0], 1),
        "max_ms": round(ordered[-1], 1),
    }


async def open_store(root: Path) -> tuple[StoreWriter, StoreReader, WorktreeManager, RepoRegistry]:
    database = open_database(root / "daemon.db")
    writer, reader = StoreWriter(database), StoreReader(database)
    manager = WorktreeManager(
        writer, reader, WorktreeSettings(min_free_bytes=0), default_base_dir=root / "worktrees"
    )
    return writer, reader, manager, RepoRegistry(writer, reader, manager)


async def bench_big_repo(root: Path, rounds: int) -> dict[str, object]:
    repo = root / "big"
    make_repo(repo, 100, 100)
    writer, reader, manager, repos = await open_store(root)
    record = await repos.register(str(repo), RepoChanges())
    creates, removes, analyses, bare_adds, bare_removes = [], [], [], [], []
    for index in range(rounds):
        # The floor: git alone, on the same repository, just before.
        bare = str(root / f"bare{index}")
        add = git_ok(repo, "worktree", "add", "-b", f"b{index}", bare, what="add")
        bare_adds.append(await timed(add))
        bare_removes.append(await timed(git_ok(repo, "worktree", "remove", bare, what="remove")))
        created = manager.create(name=f"task{index}", repo_id=record.id)
        began = time.perf_counter()
        view = await created
        creates.append((time.perf_counter() - began) * 1000)
        analyses.append(await timed(manager.at_risk(view.record.id)))
        removes.append(await timed(manager.remove(view.record.id)))
    await writer.close()
    reader.close()
    return {
        "files": 10_000,
        "create": summary(creates),
        "remove": summary(removes),
        "at_risk_analysis": summary(analyses),
        "git_worktree_add_alone": summary(bare_adds),
        "git_worktree_remove_alone": summary(bare_removes),
    }


async def bench_list(root: Path, worktrees: int, repeats: int) -> dict[str, object]:
    repo = root / "small"
    make_repo(repo, 5, 10)
    writer, reader, manager, repos = await open_store(root / "list")
    record = await repos.register(str(repo), RepoChanges())
    ids = [
        (await manager.create(name=f"w{index:03d}", repo_id=record.id)).record.id
        for index in range(worktrees)
    ]

    def sessions(conn: sqlite3.Connection) -> None:
        for number in range(3 * worktrees):
            worktree = ids[number % worktrees]
            create_session(
                conn,
                session_id=f"s{number}",
                model="m",
                working_directory=str(repo),
                now=time.time(),
                worktree_id=worktree,
            )

    await writer.call(sessions)
    samples = [await timed(manager.list_worktrees()) for _ in range(repeats)]
    listed = await manager.list_worktrees()
    assert len(listed) == worktrees
    assert all(v.exists_on_disk for v in listed)
    assert sum(v.record.session_count for v in listed) == 3 * worktrees
    await writer.close()
    reader.close()
    return {"worktrees": worktrees, "sessions": 3 * worktrees, "list": summary(samples)}


async def main_async(quick: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-worktrees-") as scratch:
        root = Path(scratch)
        big = await bench_big_repo(root, 3 if quick else 10)
        listing = await bench_list(root, 100, 10 if quick else 50)
    return {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "create_remove_10k_files": big,
        "list_100": listing,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    options = parser.parse_args()
    figures = asyncio.run(main_async(options.quick))
    big, listing = figures["create_remove_10k_files"], figures["list_100"]
    assert isinstance(big, dict)
    assert isinstance(listing, dict)
    for label, key in (
        ("create", "create"),
        ("git worktree add alone", "git_worktree_add_alone"),
        ("remove", "remove"),
        ("git worktree remove alone", "git_worktree_remove_alone"),
        ("removal analysis", "at_risk_analysis"),
    ):
        s = big[key]
        print(
            f"10,000-file repo, {label:<26}: median {s['median_ms']} ms "
            f"(min {s['min_ms']}, max {s['max_ms']}, n={s['n']})"
        )
    s = listing["list"]
    print(
        f"list of {listing['worktrees']} worktrees ({listing['sessions']} sessions): "
        f"median {s['median_ms']} ms (min {s['min_ms']}, max {s['max_ms']}, n={s['n']})"
    )
    if options.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
