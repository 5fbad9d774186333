"""Setup hooks (WT-07/08): run in the new worktree with WORKTREE_PATH/WORKTREE_BRANCH and no
secrets; a failure or a timeout is reported and the worktree stays usable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness.conditions import until
from harness.git_repos import GitWorld, open_world, sh

from betcode.config.settings import WorktreeSettings
from betcode.worktrees import RepoChanges

DUMP_ENV = "env -0 > env.dump"


@pytest.fixture(autouse=True)
def secret_in_daemon_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("SOME_TOKEN", "also-secret")


async def test_the_repo_script_runs_in_the_worktree_without_secrets(world: GitWorld) -> None:
    await world.repos.update(world.record.id, RepoChanges(setup_script=DUMP_ENV))
    view = await world.worktrees.create(name="setup-ok", repo_id=world.record.id)
    assert view.record.setup_status == "succeeded"
    assert view.record.setup_error is None
    dump = (Path(view.record.path) / "env.dump").read_text().split("\0")
    env = dict(line.split("=", 1) for line in dump if "=" in line)
    assert env["WORKTREE_PATH"] == view.record.path
    assert env["WORKTREE_BRANCH"] == "setup-ok"
    assert env["PATH"] == os.environ["PATH"]
    assert "ANTHROPIC_API_KEY" not in env
    assert "SOME_TOKEN" not in env


async def test_the_checked_in_setup_script_is_found(world: GitWorld) -> None:
    (world.repo / ".betcode").mkdir()
    (world.repo / ".betcode" / "worktree-setup.sh").write_text('echo "$WORKTREE_BRANCH" > ran\n')
    sh(world.repo, "add", ".betcode")
    sh(world.repo, "commit", "-q", "-m", "setup script")
    view = await world.worktrees.create(name="scripted", repo_id=world.record.id)
    assert view.record.setup_status == "succeeded"
    assert (Path(view.record.path) / "ran").read_text() == "scripted\n"


async def test_a_failing_setup_is_reported_and_the_worktree_stays(world: GitWorld) -> None:
    view = await world.worktrees.create(
        name="setup-bad",
        repo_id=world.record.id,
        setup_script="echo installing; echo 'npm ERR! broken' >&2; exit 1",
    )
    assert view.record.setup_status == "failed"
    assert view.record.setup_error is not None
    assert "exited with code 1" in view.record.setup_error
    assert "npm ERR! broken" in view.record.setup_error
    stored = await world.worktrees.get(view.record.id)
    assert stored.exists_on_disk
    assert stored.record.setup_status == "failed"
    assert (Path(view.record.path) / "README.md").exists()


async def test_a_setup_over_its_time_limit_is_killed(tmp_path: Path) -> None:
    settings = WorktreeSettings(
        setup_commands=("sleep 73.25 & sleep 73.25", "touch never"),
        setup_timeout_secs=2.0,
        min_free_bytes=0,
    )
    world = await open_world(tmp_path, settings)
    try:
        view = await world.worktrees.create(name="slow", repo_id=world.record.id)
        assert view.record.setup_status == "timeout"
        assert view.record.setup_error is not None
        assert "sleep 73.25 & sleep 73.25" in view.record.setup_error
        assert "daemon.worktree.setup_timeout_secs (2 s)" in view.record.setup_error
        path = Path(view.record.path)
        assert not (path / "never").exists()
        # SIGKILL went to the whole process group: the background sleep goes too.
        await until(lambda: "sleep 73.25" not in _processes())
    finally:
        await world.writer.close()
        world.reader.close()


def _processes() -> str:
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue
    return "\n".join(lines)
