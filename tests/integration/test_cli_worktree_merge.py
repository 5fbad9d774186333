"""`betcode worktree diff | merge` against a real daemon and real git (click's runner in a
worker thread): a task's worktree is diffed, merged with --squash --remove, a conflicting one
is refused (exit 1) leaving the base as it was, and a name already taken exits 5, not 7."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from harness.daemon import InProcessDaemon
from harness.environment import Workspace
from harness.git_repos import commit_file, sh

from betcode.cli.main import cli


async def betcode(daemon: InProcessDaemon, *args: str) -> Result:
    command = [*args, "--socket", str(daemon.socket)]
    return await asyncio.to_thread(CliRunner().invoke, cli, command)


async def new_worktree(daemon: InProcessDaemon, repo: Path, name: str) -> Path:
    made = await betcode(daemon, "worktree", "create", name, "--repo", str(repo), "--json")
    assert made.exit_code == 0, made.output
    return Path(json.loads(made.stdout)["path"])


async def test_diff_merge_squash_remove_and_a_refused_conflict(
    daemon: InProcessDaemon, workspace: Workspace
) -> None:
    repo = workspace.repo
    sh(repo, "config", "user.name", "Merger")
    sh(repo, "config", "user.email", "merger@example.invalid")
    assert (await betcode(daemon, "repo", "register", str(repo))).exit_code == 0
    task = await new_worktree(daemon, repo, "task")
    commit_file(task, "feature.txt", "the feature\n", "add the feature")

    shown = await betcode(daemon, "worktree", "diff", "task")
    assert shown.exit_code == 0, shown.output
    assert "+the feature" in shown.stdout
    taken = await betcode(daemon, "worktree", "create", "task", "--repo", str(repo))
    assert taken.exit_code == 5  # a user error, not an internal one
    assert "already has a worktree called 'task'" in taken.stderr

    merged = await betcode(daemon, "worktree", "merge", "task", "--squash", "--remove")
    assert merged.exit_code == 0, merged.output
    assert "1 commit(s) of task squashed into one commit on main" in merged.stdout
    assert "Removed task" in merged.stdout
    assert (repo / "feature.txt").read_text() == "the feature\n"
    assert not task.exists()

    clash = await new_worktree(daemon, repo, "clash")
    commit_file(clash, "feature.txt", "theirs\n", "change it there")
    commit_file(repo, "feature.txt", "ours\n", "change it here")
    before = sh(repo, "rev-parse", "main")
    refused = await betcode(daemon, "worktree", "merge", "clash", "--remove")
    assert refused.exit_code == 1
    assert "would conflict in feature.txt; nothing was changed" in refused.stderr
    assert sh(repo, "rev-parse", "main") == before
    assert sh(repo, "status", "--porcelain") == ""
    assert clash.exists()  # --remove did not run


async def test_create_without_repo_uses_and_registers_the_repository_here(
    daemon: InProcessDaemon, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside = workspace.repo / "src"
    inside.mkdir()
    monkeypatch.chdir(inside)
    made = await betcode(daemon, "worktree", "create", "here", "--json")
    assert made.exit_code == 0, made.output
    listed = await betcode(daemon, "repo", "list", "--json")
    repos = json.loads(listed.stdout)["repos"]
    assert [r["repo_path"] for r in repos] == [str(workspace.repo.resolve())]
    monkeypatch.chdir(workspace.root)
    outside = await betcode(daemon, "worktree", "create", "nowhere")
    assert outside.exit_code == 5
    assert "is not in a git repository" in outside.stderr
