"""Names, branches and where a worktree goes.

Every path is canonicalised (symlinks resolved) before use; a worktree path must stay inside
the tree its repository's placement allows, so neither `..` nor a symlink can lead out of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from betcode.storage.worktrees import RepoRecord
from betcode.worktrees.errors import Refusal, WorktreeError

MAX_NAME_CHARS = 100
MAX_BRANCH_CHARS = 200
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# What git's check-ref-format forbids, checked here so a bad branch never reaches git.
_BRANCH_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|@\{|//|/\.|\.lock(/|$)")


def check_worktree_name(name: str) -> str:
    if not name:
        raise WorktreeError(Refusal.INVALID, "a worktree name is required")
    if "/" in name or "\\" in name:
        raise WorktreeError(
            Refusal.INVALID,
            f"worktree name {name!r} contains a path separator; use letters, digits, '.', '_', '-'",
        )
    if len(name) > MAX_NAME_CHARS or not _NAME.match(name) or ".." in name:
        raise WorktreeError(
            Refusal.INVALID,
            f"worktree name {name!r} is not allowed: 1-{MAX_NAME_CHARS} letters, digits, '.', "
            "'_' or '-', starting with a letter or digit, without '..'",
        )
    return name


def check_branch_name(branch: str) -> str:
    if ".." in branch:
        raise WorktreeError(Refusal.INVALID, f"branch name {branch!r} contains '..'")
    if (
        not branch
        or len(branch) > MAX_BRANCH_CHARS
        or branch.startswith(("-", "/", "."))
        or branch.endswith(("/", ".", ".lock"))
        or branch == "@"
        or _BRANCH_FORBIDDEN.search(branch)
    ):
        raise WorktreeError(
            Refusal.INVALID, f"branch name {branch!r} is not a valid git branch name"
        )
    return branch


def canonical_dir(path: str, what: str) -> Path:
    """An existing directory given by an absolute path, symlinks resolved."""
    if not path:
        raise WorktreeError(Refusal.INVALID, f"{what} is required")
    given = Path(path).expanduser()
    if not given.is_absolute():
        raise WorktreeError(Refusal.INVALID, f"{what} must be an absolute path, got {path!r}")
    resolved = given.resolve()
    if not resolved.is_dir():
        raise WorktreeError(
            Refusal.NOT_FOUND, f"{what} {path!r} does not exist or is not a directory"
        )
    return resolved


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True, slots=True)
class Placement:
    root: Path  # the tree the worktree must stay in (canonical)
    path: Path  # where the worktree goes (canonical parent, not yet existing)


def place_worktree(repo: RepoRecord, name: str, global_base: Path) -> Placement:
    """Where worktree `name` of `repo` goes: GLOBAL `<base>/<repo name>/<name>`, LOCAL
    `<repo>/<subfolder>/<name>`, CUSTOM `<custom path>/<name>`."""
    if repo.worktree_mode == "local":
        allowed, below = Path(repo.repo_path), repo.local_subfolder
    elif repo.worktree_mode == "custom":
        if not repo.custom_path:
            raise WorktreeError(
                Refusal.INVALID, f"repository {repo.name!r} is CUSTOM but has no custom_path"
            )
        allowed, below = Path(repo.custom_path), "."
    else:
        allowed, below = global_base, repo.name
    allowed = allowed.resolve()
    root = (allowed / below).resolve()
    if not inside(root, allowed):
        raise WorktreeError(
            Refusal.OUTSIDE,
            f"the worktree folder {allowed / below} resolves to {root}, outside {allowed} "
            "(through a symlink or '..')",
            {"path": str(root)},
        )
    path = (root / name).resolve()
    if path.parent != root:
        raise WorktreeError(
            Refusal.OUTSIDE,
            f"worktree path {root / name} resolves to {path}, outside {root}",
            {"path": str(path)},
        )
    return Placement(root, path)


def check_subfolder(subfolder: str) -> str:
    """A LOCAL placement's folder: relative, inside the repository."""
    folder = subfolder or ".worktree"
    parts = Path(folder).parts
    if Path(folder).is_absolute() or ".." in parts or folder.startswith("-"):
        raise WorktreeError(
            Refusal.OUTSIDE,
            f"local_subfolder {subfolder!r} must be a relative path inside the repository",
            {"path": subfolder},
        )
    if parts and parts[0] == ".git":
        raise WorktreeError(Refusal.INVALID, "local_subfolder must not be inside .git")
    return folder
