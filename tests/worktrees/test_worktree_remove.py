"""Removal that never loses work: refused (FAILED_PRECONDITION, naming what) for each kind of
work at risk, allowed when nothing is, and forced only after a rescue ref saved everything."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from harness.git_repos import GitWorld, commit_file, sh

from betcode.storage.sessions import create_session
from betcode.storage.worktrees import set_stale
from betcode.worktrees import Refusal, WorkAtRisk, WorktreeError, WorktreeView


async def new_worktree(world: GitWorld, name: str = "task") -> tuple[WorktreeView, Path]:
    view = await world.worktrees.create(name=name, repo_id=world.record.id)
    return view, Path(view.record.path)


async def refused_because(world: GitWorld, view: WorktreeView, *fragments: str) -> list[str]:
    with pytest.raises(WorkAtRisk) as caught:
        await world.worktrees.remove(view.record.id)
    assert caught.value.refusal is Refusal.AT_RISK
    text = " ".join(caught.value.at_risk)
    for fragment in fragments:
        assert fragment in text, text
    # Nothing was touched.
    assert view.record.path in world.git_worktrees()
    checkout = Path(view.record.path)
    assert (checkout / "README.md").exists()
    assert world.rows() == 1
    assert view.record.branch in world.branches()
    return caught.value.at_risk


async def test_uncommitted_changes_refuse_removal(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    (path / "README.md").write_text("edited\n")
    await refused_because(world, view, "1 uncommitted change (README.md)")
    assert (path / "README.md").read_text() == "edited\n"


async def test_untracked_files_refuse_removal_but_ignored_ones_do_not(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    (path / "build.log").write_text("ignored\n")
    assert await world.worktrees.at_risk(view.record.id) == []
    (path / "notes").mkdir()
    (path / "notes" / "idea.md").write_text("keep me\n")
    await refused_because(world, view, "1 untracked file (notes/idea.md)")


async def test_an_unpushed_commit_refuses_removal(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    commit_file(path, "work.txt", "work\n", "precious work")
    at_risk = await refused_because(world, view, "1 commit on no other branch", "precious work")
    assert "not merged into main" in at_risk[0]


async def test_a_running_turn_refuses_removal(world: GitWorld) -> None:
    view, _ = await new_worktree(world)

    class Busy:
        def busy_in_worktree(self, worktree_id: str) -> list[str]:
            return [f"a running turn in session s-1 of {worktree_id}"]

        async def close_worktree_sessions(self, worktree_id: str) -> int:
            raise AssertionError("must not close sessions of a refused removal")

        async def move_all(
            self, from_directory: str, directory: str, worktree_id: str
        ) -> tuple[str, ...]:
            raise AssertionError("a removal moves no session")

    world.worktrees.sessions = Busy()
    await refused_because(world, view, "a running turn in session s-1")


async def test_a_pending_approval_refuses_removal(world: GitWorld) -> None:
    view, path = await new_worktree(world)

    def pending(conn: sqlite3.Connection) -> None:
        create_session(
            conn,
            session_id="s-approve",
            model="m",
            working_directory=str(path),
            now=1.0,
            worktree_id=view.record.id,
        )
        conn.execute(
            "INSERT INTO pending_permissions (request_id, session_id, tool_name, input, dialect,"
            " received_at, expires_at) VALUES ('r1', 's-approve', 'Write', '{}', 'stdio', 1, 9e9)"
        )

    await world.writer.call(pending)
    await refused_because(world, view, "1 pending approval")


async def test_a_clean_worktree_is_removed_with_its_branch(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    (path / "debug.log").write_text("ignored output\n")
    removal = await world.worktrees.remove(view.record.id)
    assert removal.rescue is None
    assert removal.at_risk == []
    assert not path.exists()
    assert "task" not in world.branches()
    assert world.rows() == 0
    assert world.git_worktrees() == [str(world.repo)]


async def test_a_pushed_branch_is_removed(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    commit_file(path, "done.txt", "done\n", "finished")
    sh(path, "push", "-q", "origin", "task")
    await world.worktrees.remove(view.record.id)
    assert not path.exists()
    assert "task" not in world.branches()
    assert "task" in sh(world.remote, "branch", "--list", "task")


async def test_a_squash_merged_branch_counts_as_merged(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    commit_file(path, "a.txt", "a\n", "part one")
    commit_file(path, "b.txt", "b\n", "part two")
    sh(world.repo, "merge", "-q", "--squash", "task")
    sh(world.repo, "commit", "-q", "-m", "squashed task")
    commit_file(world.repo, "later.txt", "later\n", "main moves on")
    await world.worktrees.remove(view.record.id)
    assert "task" not in world.branches()


async def test_a_rebase_merged_branch_counts_as_merged(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    commit_file(world.repo, "main.txt", "main\n", "main first")
    commit_file(path, "c.txt", "c\n", "to be rebased")
    sh(world.repo, "cherry-pick", "task")
    await world.worktrees.remove(view.record.id)
    assert "task" not in world.branches()


async def test_a_branch_the_daemon_did_not_create_is_never_deleted(world: GitWorld) -> None:
    sh(world.repo, "branch", "theirs")
    view = await world.worktrees.create(
        name="t", repo_id=world.record.id, branch="theirs", create_branch=False
    )
    commit_file(Path(view.record.path), "mine.txt", "x\n", "on their branch")
    # The commit stays on `theirs`, so removing the checkout loses nothing.
    await world.worktrees.remove(view.record.id)
    assert "theirs" in world.branches()
    assert "on their branch" in sh(world.repo, "log", "-1", "--format=%s", "theirs")


async def test_force_saves_everything_and_restore_brings_it_back(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    first = commit_file(path, "one.txt", "one\n", "commit one")
    second = commit_file(path, "two.txt", "two\n", "commit two")
    (path / "README.md").write_text("changed, not committed\n")
    (path / "one.txt").unlink()
    (path / "new").mkdir()
    (path / "new" / "untracked.txt").write_text("untracked\n")
    (path / "staged.txt").write_text("staged\n")
    sh(path, "add", "staged.txt")
    (path / "skip.log").write_text("ignored output\n")

    removal = await world.worktrees.remove(view.record.id, force=True)
    rescue = removal.rescue
    assert rescue is not None
    assert len(removal.at_risk) == 3
    assert not path.exists()
    assert "task" not in world.branches()
    assert sh(world.repo, "rev-parse", rescue.ref).strip() == rescue.work_commit
    assert [r.id for r in await world.worktrees.rescues()] == [rescue.id]

    restored = await world.worktrees.restore(rescue.id)
    back = Path(restored.record.path)
    log = sh(back, "log", "--format=%H").split()
    assert log[:2] == [second, first]
    assert (back / "README.md").read_text() == "changed, not committed\n"
    assert not (back / "one.txt").exists()
    assert (back / "new" / "untracked.txt").read_text() == "untracked\n"
    assert (back / "staged.txt").read_text() == "staged\n"
    status = sh(back, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(status) == sorted(
        [" M README.md", " D one.txt", "?? new/untracked.txt", "?? staged.txt"]
    )


async def test_force_with_only_commits_at_risk_keeps_them_under_the_ref(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    tip = commit_file(path, "c.txt", "c\n", "only a commit")
    removal = await world.worktrees.remove(view.record.id, force=True)
    assert removal.rescue is not None
    assert removal.rescue.work_commit is None
    assert sh(world.repo, "rev-parse", removal.rescue.ref).strip() == tip
    sh(world.repo, "gc", "-q", "--prune=now")
    assert sh(world.repo, "cat-file", "-t", tip).strip() == "commit"


async def test_an_externally_deleted_worktree_is_stale_pruned_and_removable(
    world: GitWorld, caplog: pytest.LogCaptureFixture
) -> None:
    view, path = await new_worktree(world)
    shutil.rmtree(path)
    # As startup reconciliation flags it: git must still be told to forget it.
    await world.writer.call(lambda c: set_stale(c, [view.record.id]))
    listed = await world.worktrees.list_worktrees()
    assert not listed[0].exists_on_disk
    assert (await world.worktrees.get(view.record.id)).record.stale
    assert f"Worktree {view.record.id} directory missing: {path}" in caplog.text
    assert world.git_worktrees() == [str(world.repo)]  # git worktree prune ran
    await world.worktrees.remove(view.record.id)
    assert world.rows() == 0
    assert "task" not in world.branches()


async def test_a_stale_worktree_with_unmerged_commits_keeps_its_branch(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    commit_file(path, "w.txt", "w\n", "work before the folder vanished")
    shutil.rmtree(path)
    await refused_because_stale(world, view)


async def refused_because_stale(world: GitWorld, view: WorktreeView) -> None:
    with pytest.raises(WorkAtRisk) as caught:
        await world.worktrees.remove(view.record.id)
    assert "work before the folder vanished" in " ".join(caught.value.at_risk)
    removal = await world.worktrees.remove(view.record.id, force=True)
    assert removal.rescue is not None
    assert "task" not in world.branches()
    assert world.rows() == 0
    subject = sh(world.repo, "log", "-1", "--format=%s", removal.rescue.ref).strip()
    assert subject == "work before the folder vanished"


async def test_a_commit_on_a_detached_head_refuses_removal(world: GitWorld) -> None:
    sh(world.repo, "branch", "theirs")
    view = await world.worktrees.create(
        name="t", repo_id=world.record.id, branch="theirs", create_branch=False
    )
    path = Path(view.record.path)
    sh(path, "checkout", "-q", "--detach")
    commit_file(path, "loose.txt", "x\n", "on no branch at all")
    await refused_because(world, view, "1 commit on no other branch", "on no branch at all")


async def test_unregister_removes_worktrees_only_when_asked_and_safe(world: GitWorld) -> None:
    clean, _ = await new_worktree(world, "clean")
    _, path = await new_worktree(world, "dirty")
    (path / "wip.txt").write_text("wip\n")
    with pytest.raises(WorktreeError) as caught:
        await world.repos.unregister(world.record.id, remove_worktrees=False)
    assert caught.value.refusal is Refusal.PRECONDITION
    with pytest.raises(WorkAtRisk):
        await world.repos.unregister(world.record.id, remove_worktrees=True)
    # The clean one went; the one with work stopped the unregistering.
    assert [v.record.name for v in await world.worktrees.list_worktrees()] == ["dirty"]
    assert clean.record.path not in world.git_worktrees()
    assert (path / "wip.txt").exists()
    assert world.rows("git_repos") == 1
    (path / "wip.txt").unlink()
    assert await world.repos.unregister(world.record.id, remove_worktrees=True) == 1
    assert world.rows("git_repos") == 0
    assert world.rows() == 0


async def test_a_folder_git_will_not_remove_is_reported_and_left(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    sh(world.repo, "worktree", "lock", str(path), "--reason", "on a USB disk")
    with pytest.raises(WorktreeError) as caught:
        await world.worktrees.remove(view.record.id, force=True)
    assert caught.value.refusal is Refusal.GIT_FAILED
    assert "locked" in caught.value.details["git_stderr"]
    assert (path / "README.md").exists()  # no rm -rf fallback
    assert world.rows() == 1
    assert "task" in world.branches()


async def test_session_activity_is_the_worktree_s_last_activity(world: GitWorld) -> None:
    view, path = await new_worktree(world)
    later = view.record.last_active + 3600

    def session(conn: sqlite3.Connection) -> None:
        create_session(
            conn,
            session_id="s-active",
            model="m",
            working_directory=str(path),
            now=later,
            worktree_id=view.record.id,
        )

    await world.writer.call(session)
    seen = (await world.worktrees.get(view.record.id)).record
    assert seen.session_count == 1
    assert seen.last_active == later
