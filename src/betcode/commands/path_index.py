"""The paths below a working directory, listed once and refreshed when the tree changes.

In a git work tree the list is `git ls-files -co --exclude-standard` (tracked and untracked
files, `.gitignore` and the repository's excludes respected); elsewhere a walk that reads every
`.gitignore` on the way. Directories come from the files' parents. Symlinks are listed but never
followed. The listing is bounded (MAX_INDEXED_PATHS entries, BUILD_SECONDS); an index cut short
says so (`complete`).

Freshness is a stat per listed directory and per ignore file: creating, deleting or renaming an
entry changes its directory's mtime, editing a `.gitignore` changes that file's. Everything here
does blocking I/O: callers run it in a worker thread.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from betcode.commands.path_query import IndexedPath, PathQueryError

MAX_INDEXED_PATHS = 200_000
BUILD_SECONDS = 5.0
GITIGNORE = ".gitignore"


@dataclass(frozen=True, slots=True)
class PathIndex:
    root: Path  # resolved
    paths: tuple[IndexedPath, ...]
    watched: dict[str, int]  # absolute path → st_mtime_ns (directories and ignore files)
    complete: bool
    from_git: bool
    built_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class PathDetails:
    path: str
    kind: str  # "file", "directory" or "symlink"
    size: int
    modified_at: int  # Unix seconds


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime_ns
    except OSError:
        return -1  # gone: differs from any real mtime, so a later check sees the change


def is_stale(index: PathIndex) -> bool:
    return any(_mtime_ns(path) != mtime for path, mtime in index.watched.items())


def _git_listing(root: Path, deadline: float) -> list[str] | None:
    """Files below `root` as git sees them, or None when `root` is not in a work tree."""
    try:
        done = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            timeout=max(0.1, deadline - time.monotonic()),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    names = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    return [name for name in names if name]


def _walk_listing(root: Path, deadline: float) -> tuple[list[str], bool]:
    """Files below `root` not ignored by any `.gitignore` on the way (and never `.git`)."""
    files: list[str] = []
    rules: list[tuple[str, pathspec.GitIgnoreSpec]] = []  # (directory prefix, its rules)

    def ignored(relative: str, is_dir: bool) -> bool:
        for prefix, spec in rules:
            if relative.startswith(prefix):
                inner = relative[len(prefix) :] + ("/" if is_dir else "")
                if spec.match_file(inner):
                    return True
        return False

    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        if len(files) >= MAX_INDEXED_PATHS or time.monotonic() > deadline:
            return files, False
        relative_dir = os.path.relpath(folder, root)
        prefix = "" if relative_dir == "." else relative_dir + "/"
        if GITIGNORE in filenames:
            try:
                with open(os.path.join(folder, GITIGNORE), encoding="utf-8") as rules_file:
                    rules.append((prefix, pathspec.GitIgnoreSpec.from_lines(rules_file)))
            except (OSError, UnicodeDecodeError):
                pass  # an unreadable .gitignore ignores nothing, as git does
        kept_dirs = []
        for name in sorted(dirnames):
            if name == ".git" or ignored(prefix + name, True):
                continue
            if os.path.islink(os.path.join(folder, name)):
                files.append(prefix + name)  # listed, never followed
            else:
                kept_dirs.append(name)
        dirnames[:] = kept_dirs
        files.extend(
            prefix + name for name in sorted(filenames) if not ignored(prefix + name, False)
        )
    return files, True


def build_index(root: Path) -> PathIndex:
    """Lists `root` (an existing, resolved directory) within the bounds."""
    deadline = time.monotonic() + BUILD_SECONDS
    listed = _git_listing(root, deadline)
    from_git = listed is not None
    complete = True
    if listed is None:
        listed, complete = _walk_listing(root, deadline)
    if len(listed) > MAX_INDEXED_PATHS:
        listed, complete = listed[:MAX_INDEXED_PATHS], False
    folders: set[str] = set()
    for name in listed:
        parent = name.rpartition("/")[0]
        while parent and parent not in folders:
            folders.add(parent)
            parent = parent.rpartition("/")[0]
    watched = {str(root): _mtime_ns(str(root))}
    for folder in folders:
        watched[str(root / folder)] = _mtime_ns(str(root / folder))
    for name in listed:
        if name == GITIGNORE or name.endswith("/" + GITIGNORE):
            watched[str(root / name)] = _mtime_ns(str(root / name))
    paths = tuple(IndexedPath.of(name) for name in sorted({*listed, *folders}))
    return PathIndex(root, paths, watched, complete, from_git)


def check_inside(root: Path, query: str) -> None:
    """Refuses a query whose folder part resolves (through symlinks) outside `root`."""
    folder = query.rpartition("/")[0]
    if not folder:
        return
    target = Path(os.path.realpath(root / folder))
    if target != root and root not in target.parents:
        raise PathQueryError(
            f"{folder!r} leads outside the working directory (a symlink to {target})"
        )


def details(root: Path, relative: str) -> PathDetails | None:
    """What `relative` is now (a symlink is reported as one, not followed); None if gone."""
    try:
        info = os.stat(root / relative, follow_symlinks=False)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(info.st_mode):
        kind = "directory"
    else:
        kind = "file"
    return PathDetails(relative, kind, info.st_size if kind == "file" else 0, int(info.st_mtime))
