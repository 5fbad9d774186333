"""Creating worktrees on real repositories: placement, branches, and every refusal of WT-09
leaving nothing behind (no row, no directory, no branch, no .gitignore line)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness.git_repos import GitWorld, open_world, sh

from betcode.config.settings import WorktreeSettings
from betcode.worktrees import Refusal, RepoChanges, WorktreeError


async def test_create_makes_a_branch_and_a_checkout_in_the_global_base(world: GitWorld) -> None:
    view = await world.worktrees.create(name="auth", repo_id=world.record.id)
    path = Path(view.record.path)
    assert path == world.base_dir / "project" / "auth"
    assert (path / "README.md").read_text() == "hello\n"
    assert sh(path, "symbolic-ref", "--short", "HEAD").strip() == "auth"
    assert view.record.branch_created
    assert view.record.base_branch == "main"
    assert view.record.setup_status == "none"
    assert view.exists_on_disk
    assert str(path) in world.git_worktrees()
    listed = await world.worktrees.list_worktrees(world.record.id)
    assert [v.record.id for v in listed] == [view.record.id]


async def test_an_existing_branch_is_checked_out_not_created(world: GitWorld) -> None:
    sh(world.repo, "branch", "feature")
    view = await world.worktrees.create(
        name="feat", repo_id=world.record.id, branch="feature", create_branch=False
    )
    assert not view.record.branch_created
    assert sh(Path(view.record.path), "symbolic-ref", "--short", "HEAD").strip() == "feature"


async def test_local_placement_goes_inside_the_repo_and_is_gitignored(world: GitWorld) -> None:
    await world.repos.update(world.record.id, RepoChanges(worktree_mode="local"))
    view = await world.worktrees.create(name="inside", repo_id=world.record.id)
    assert Path(view.record.path) == world.repo / ".worktree" / "inside"
    assert "/.worktree/" in (world.repo / ".gitignore").read_text().split()
    # The main checkout does not see the worktree as untracked files.
    assert ".worktree" not in sh(world.repo, "status", "--porcelain", "--untracked-files=all")


async def refused(world: GitWorld, refusal: Refusal, **request: object) -> WorktreeError:
    branches = world.branches()
    gitignore = (world.repo / ".gitignore").read_bytes()
    with pytest.raises(WorktreeError) as caught:
        await world.worktrees.create(repo_id=world.record.id, **request)  # type: ignore[arg-type]
    assert caught.value.refusal is refusal, caught.value
    world.nothing_left(branches)
    assert (world.repo / ".gitignore").read_bytes() == gitignore
    return caught.value


@pytest.mark.parametrize("branch", ["a..b", "../escape", "-rf", "has space", "x.lock", "a~1"])
async def test_bad_branch_names_are_invalid(world: GitWorld, branch: str) -> None:
    await refused(world, Refusal.INVALID, name="ok", branch=branch)


@pytest.mark.parametrize("name", ["a/b", "..", "a\\b", "", "-x", ".hidden", "x" * 101])
async def test_bad_worktree_names_are_invalid(world: GitWorld, name: str) -> None:
    await refused(world, Refusal.INVALID, name=name)


async def test_a_branch_checked_out_elsewhere_already_exists(world: GitWorld) -> None:
    error = await refused(world, Refusal.EXISTS, name="dup", branch="main", create_branch=False)
    assert str(world.repo) in error.message


async def test_an_existing_target_path_already_exists(world: GitWorld) -> None:
    target = world.base_dir / "project" / "taken"
    target.mkdir(parents=True)
    (target / "mine.txt").write_text("not git's")
    branches = world.branches()
    with pytest.raises(WorktreeError) as caught:
        await world.worktrees.create(name="taken", repo_id=world.record.id)
    assert caught.value.refusal is Refusal.EXISTS
    assert (target / "mine.txt").read_text() == "not git's"  # untouched
    assert world.branches() == branches
    assert world.rows() == 0


async def test_a_missing_branch_without_create_is_not_found(world: GitWorld) -> None:
    await refused(world, Refusal.NOT_FOUND, name="nf", branch="nope", create_branch=False)


async def test_a_worktree_name_used_twice_in_a_repo_already_exists(world: GitWorld) -> None:
    await world.worktrees.create(name="twice", repo_id=world.record.id)
    with pytest.raises(WorktreeError) as caught:
        await world.worktrees.create(name="twice", repo_id=world.record.id, branch="other")
    assert caught.value.refusal is Refusal.EXISTS
    assert "other" not in world.branches()


async def test_an_unknown_repository_is_not_found(world: GitWorld) -> None:
    with pytest.raises(WorktreeError) as caught:
        await world.worktrees.create(name="x", repo_id="no-such-repo")
    assert caught.value.refusal is Refusal.NOT_FOUND


async def test_too_little_disk_is_resource_exhausted_with_the_figures(tmp_path: Path) -> None:
    world = await open_world(tmp_path, WorktreeSettings(min_free_bytes=2**62))
    try:
        error = await refused(world, Refusal.NO_SPACE, name="big")
        required, available = (
            int(error.details["required_bytes"]),
            int(error.details["available_bytes"]),
        )
        assert required > available > 0
    finally:
        await world.writer.close()
        world.reader.close()


async def test_a_git_failure_is_internal_with_stderr_and_rolls_back(world: GitWorld) -> None:
    # A post-checkout hook that fails makes `git worktree add` fail after it made the
    # directory and the branch: both must go again.
    hook = world.repo / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\necho 'hook refuses this checkout' >&2\nexit 3\n")
    hook.chmod(0o755)
    await world.repos.update(world.record.id, RepoChanges(worktree_mode="local"))
    error = await refused(world, Refusal.GIT_FAILED, name="hooked")
    assert "Git worktree creation failed" in error.message
    assert "hook refuses this checkout" in error.details["git_stderr"]
    assert not (world.repo / ".worktree" / "hooked").exists()


async def test_a_symlink_out_of_the_allowed_tree_is_refused(world: GitWorld) -> None:
    outside = world.root / "elsewhere"
    outside.mkdir()
    (world.repo / ".worktree").symlink_to(outside)
    await world.repos.update(world.record.id, RepoChanges(worktree_mode="local"))
    error = await refused(world, Refusal.OUTSIDE, name="escape")
    assert str(outside) in error.message
    assert os.listdir(outside) == []
