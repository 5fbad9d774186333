"""Finishing a worktree (worktrees/merge.py) on real git repositories: its diff against its
base, a regular and a squash merge into the base, and every refusal leaving the base as it
was (no commit, no half-merged checkout)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.git_repos import GitWorld, commit_file, sh

from betcode.worktrees import Refusal, WorkAtRisk, WorktreeError
from betcode.worktrees.merge import diff, merge


@pytest.fixture
async def task(world: GitWorld) -> tuple[str, Path]:
    """A worktree `task` (branch task, base main) with two commits; git knows who commits."""
    sh(world.repo, "config", "user.name", "Merger")
    sh(world.repo, "config", "user.email", "merger@example.invalid")
    view = await world.worktrees.create(name="task", repo_id=world.record.id)
    path = Path(view.record.path)
    commit_file(path, "feature.txt", "one\n", "add the feature")
    commit_file(path, "feature.txt", "one\ntwo\n", "extend the feature")
    return view.record.id, path


def head(checkout: Path, ref: str = "HEAD") -> str:
    return sh(checkout, "rev-parse", ref).strip()


def parents(checkout: Path, ref: str = "main") -> list[str]:
    return sh(checkout, "rev-list", "--parents", "-n", "1", ref).split()[1:]


def untouched(world: GitWorld, before: str) -> None:
    """The base branch and its checkout are exactly as they were."""
    assert head(world.repo, "main") == before
    assert not (world.repo / ".git" / "MERGE_HEAD").exists()
    assert not (world.repo / "feature.txt").exists()


async def test_diff_against_the_base_with_uncommitted_and_untracked(
    world: GitWorld, task: tuple[str, Path]
) -> None:
    worktree_id, path = task
    (path / "feature.txt").write_text("one\ntwo\nthree\n")  # not committed: shown too
    (path / "notes.md").write_text("scratch\n")
    found = await diff(world.worktrees, worktree_id)
    assert found.base_branch == "main"
    assert found.merge_base == head(world.repo, "main")
    assert "+++ b/feature.txt" in found.diff
    assert "+three" in found.diff
    assert found.untracked == ["notes.md"]
    summary = await diff(world.worktrees, worktree_id, stat=True)
    assert "feature.txt | 3 +++" in summary.diff


async def test_a_regular_merge_makes_a_merge_commit_in_the_base_checkout(
    world: GitWorld, task: tuple[str, Path]
) -> None:
    worktree_id, path = task
    base_before, branch_tip = head(world.repo, "main"), head(path)
    merged = await merge(world.worktrees, worktree_id)
    assert (merged.base_branch, merged.commits) == ("main", 2)
    assert head(world.repo, "main") == merged.commit
    assert parents(world.repo) == [base_before, branch_tip]
    assert (world.repo / "feature.txt").read_text() == "one\ntwo\n"  # the checkout followed
    assert sh(world.repo, "status", "--porcelain") == ""
    assert "Merge branch 'task'" in sh(world.repo, "log", "-1", "--format=%s")
    await world.worktrees.remove(worktree_id)  # nothing at risk once merged


async def test_a_squash_merge_is_one_commit_and_the_worktree_can_go(
    world: GitWorld, task: tuple[str, Path]
) -> None:
    worktree_id, _path = task
    base_before = head(world.repo, "main")
    merged = await merge(world.worktrees, worktree_id, squash=True)
    assert parents(world.repo) == [base_before]
    body = sh(world.repo, "log", "-1", "--format=%B")
    assert "* add the feature\n* extend the feature" in body
    assert (world.repo / "feature.txt").read_text() == "one\ntwo\n"
    assert merged.commits == 2
    removal = await world.worktrees.remove(worktree_id)  # the squash counts as merged
    assert removal.rescue is None
    assert world.git_worktrees() == [str(world.repo)]


async def test_a_conflict_is_refused_and_changes_nothing(
    world: GitWorld, task: tuple[str, Path]
) -> None:
    worktree_id, path = task
    commit_file(world.repo, "feature.txt", "main's own\n", "main adds it too")
    before = head(world.repo, "main")
    with pytest.raises(WorktreeError) as refused:
        await merge(world.worktrees, worktree_id)
    assert refused.value.refusal is Refusal.PRECONDITION
    assert "would conflict in feature.txt; nothing was changed" in refused.value.message
    assert head(world.repo, "main") == before
    assert (world.repo / "feature.txt").read_text() == "main's own\n"
    assert sh(world.repo, "status", "--porcelain") == ""
    assert not (world.repo / ".git" / "MERGE_HEAD").exists()
    assert head(path) == head(world.repo, "task")  # the worktree is as it was too


async def test_a_dirty_base_checkout_is_refused_and_keeps_its_changes(
    world: GitWorld, task: tuple[str, Path]
) -> None:
    worktree_id, _path = task
    before = head(world.repo, "main")
    (world.repo / "README.md").write_text("edited, not committed\n")
    with pytest.raises(WorktreeError, match=r"checked out in .* with uncommitted changes: README"):
        await merge(world.worktrees, worktree_id)
    assert (world.repo / "README.md").read_text() == "edited, not committed\n"
    untouched(world, before)


async def test_uncommitted_work_in_the_worktree_is_refused(
    world: GitWorld, task: tuple[str, Path]
) -> None:
    worktree_id, path = task
    before = head(world.repo, "main")
    (path / "draft.txt").write_text("not yet\n")
    with pytest.raises(WorktreeError, match=r"uncommitted changes, .*draft\.txt\. Commit them"):
        await merge(world.worktrees, worktree_id)
    untouched(world, before)


async def test_nothing_to_merge_is_refused(world: GitWorld) -> None:
    view = await world.worktrees.create(name="idle", repo_id=world.record.id)
    with pytest.raises(WorktreeError, match="nothing to merge"):
        await merge(world.worktrees, view.record.id)


async def test_a_base_checked_out_nowhere_moves_by_its_ref(
    world: GitWorld, task: tuple[str, Path]
) -> None:
    worktree_id, _path = task
    sh(world.repo, "checkout", "-q", "-b", "elsewhere")
    merged = await merge(world.worktrees, worktree_id)
    assert head(world.repo, "main") == merged.commit
    assert head(world.repo) != merged.commit  # the checkout on `elsewhere` was not touched
    assert not (world.repo / "feature.txt").exists()


async def test_an_unmerged_worktree_is_still_refused_removal(
    world: GitWorld, task: tuple[str, Path]
) -> None:
    worktree_id, path = task
    await merge(world.worktrees, worktree_id)
    commit_file(path, "later.txt", "after the merge\n", "more work")
    with pytest.raises(WorkAtRisk):
        await world.worktrees.remove(worktree_id)
