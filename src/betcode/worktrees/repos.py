"""The registry of git repositories worktrees are made from."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from betcode.storage import worktrees as rows
from betcode.storage.reader import StoreReader
from betcode.storage.writer import StoreWriter
from betcode.worktrees.errors import Refusal, WorktreeError
from betcode.worktrees.git import git
from betcode.worktrees.manager import WorktreeManager
from betcode.worktrees.paths import canonical_dir, check_subfolder, check_worktree_name

log = logging.getLogger(__name__)

DEFAULT_SCAN_DEPTH = 2
MAX_SCAN_DEPTH = 10
MODES: tuple[rows.WorktreeMode, ...] = ("global", "local", "custom")


@dataclass(frozen=True, slots=True)
class RepoChanges:
    """A partial update: None leaves a field as it is."""

    name: str | None = None
    worktree_mode: rows.WorktreeMode | None = None
    local_subfolder: str | None = None
    custom_path: str | None = None
    setup_script: str | None = None
    auto_gitignore: bool | None = None


class RepoRegistry:
    def __init__(self, writer: StoreWriter, reader: StoreReader, worktrees: WorktreeManager):
        self._writer = writer
        self._reader = reader
        self._worktrees = worktrees

    async def register(self, repo_path: str, changes: RepoChanges) -> rows.RepoRecord:
        path = await asyncio.to_thread(canonical_dir, repo_path, "repo_path")
        await _require_repository_top(path)
        now = time.time()
        base = rows.RepoRecord(
            id=str(uuid.uuid4()),
            name=path.name,
            repo_path=str(path),
            worktree_mode="global",
            local_subfolder=".worktree",
            custom_path=None,
            setup_script=None,
            auto_gitignore=True,
            created_at=now,
            last_active=now,
            worktree_count=0,
        )
        record = _apply(base, changes)
        if not await self._writer.call(lambda c: rows.insert_repo(c, record)):
            raise WorktreeError(
                Refusal.EXISTS, f"{path} is already registered", {"repo_path": str(path)}
            )
        log.info("repository %s registered as %s (%s)", path, record.name, record.id)
        return record

    async def get(self, repo_id: str) -> rows.RepoRecord:
        record = await self._reader.read(lambda c: rows.get_repo(c, repo_id)) if repo_id else None
        if record is None:
            raise WorktreeError(
                Refusal.NOT_FOUND, f"no repository with id {repo_id!r}", {"repo_id": repo_id}
            )
        return record

    async def find(self, name_or_id: str) -> rows.RepoRecord:
        """By id, name or path."""
        repos, _ = await self._reader.read(rows.list_repos)
        for repo in repos:
            if name_or_id in (repo.id, repo.name, repo.repo_path):
                return repo
        raise WorktreeError(
            Refusal.NOT_FOUND, f"no repository {name_or_id!r}", {"repo_id": name_or_id}
        )

    async def list_repos(
        self, limit: int = 0, offset: int = 0
    ) -> tuple[list[rows.RepoRecord], int]:
        return await self._reader.read(
            lambda c: rows.list_repos(c, limit=limit or None, offset=offset)
        )

    async def update(self, repo_id: str, changes: RepoChanges) -> rows.RepoRecord:
        record = _apply(await self.get(repo_id), changes)
        await self._writer.call(lambda c: rows.update_repo(c, record))
        return await self.get(repo_id)

    async def unregister(self, repo_id: str, *, remove_worktrees: bool) -> int:
        """Forget a repository; its worktrees go too when asked (each under the removal
        rules: one that would lose work stops the unregistering). Returns how many went."""
        repo = await self.get(repo_id)
        views = await self._worktrees.list_worktrees(repo.id)
        if views and not remove_worktrees:
            names = ", ".join(view.record.name for view in views)
            raise WorktreeError(
                Refusal.PRECONDITION,
                f"repository {repo.name!r} still has {len(views)} worktree(s) ({names}); "
                "remove them first or ask for them to be removed with it",
                {"worktrees": names},
            )
        for view in views:
            await self._worktrees.remove(view.record.id)
        await self._writer.call(lambda c: rows.delete_repo(c, repo.id))
        log.info("repository %s (%s) unregistered", repo.name, repo.repo_path)
        return len(views)

    async def scan(self, scan_path: str, max_depth: int = 0) -> list[rows.RepoRecord]:
        """Register every repository found below `scan_path` (not following symlinks),
        descending `max_depth` levels (default 2); already registered ones are listed too."""
        depth = max_depth or DEFAULT_SCAN_DEPTH
        if depth > MAX_SCAN_DEPTH:
            raise WorktreeError(
                Refusal.INVALID, f"max_depth is {depth}; at most {MAX_SCAN_DEPTH} is allowed"
            )
        root = await asyncio.to_thread(canonical_dir, scan_path, "scan_path")
        found: list[rows.RepoRecord] = []
        for path in await asyncio.to_thread(_find_repositories, root, depth):
            known = await self._reader.read(partial(rows.find_repo_by_path, repo_path=str(path)))
            if known is None:
                try:
                    known = await self.register(str(path), RepoChanges())
                except WorktreeError as error:
                    log.info("scan: %s skipped: %s", path, error)
                    continue
            found.append(known)
        return found


def _find_repositories(root: Path, depth: int) -> list[Path]:
    found: list[Path] = []
    level = [root]
    for _ in range(depth + 1):
        below: list[Path] = []
        for folder in level:
            if (folder / ".git").is_dir():
                found.append(folder)
                continue
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            below += [
                Path(e.path)
                for e in entries
                if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
            ]
        level = below
    return found


async def _require_repository_top(path: Path) -> None:
    top = await git(path, "rev-parse", "--show-toplevel")
    if not top.ok:
        raise WorktreeError(
            Refusal.INVALID, f"{path} is not a git repository", {"repo_path": str(path)}
        )
    if await asyncio.to_thread(_resolved, top.stdout.strip()) != path:
        raise WorktreeError(
            Refusal.INVALID,
            f"{path} is inside the repository {top.stdout.strip()}; register its top folder",
            {"repo_path": str(path)},
        )
    dirs = await git(path, "rev-parse", "--git-dir", "--git-common-dir")
    git_dir, common = [await asyncio.to_thread(_resolved, path, p) for p in dirs.stdout.split()]
    if git_dir != common:
        raise WorktreeError(
            Refusal.INVALID,
            f"{path} is a linked worktree; register the main repository",
            {"repo_path": str(path)},
        )


def _resolved(*parts: str | Path) -> Path:
    return Path(*parts).resolve()


def _apply(record: rows.RepoRecord, changes: RepoChanges) -> rows.RepoRecord:
    updated = dataclasses.replace(
        record,
        **{
            f.name: getattr(changes, f.name)
            for f in dataclasses.fields(changes)
            if getattr(changes, f.name) is not None
        },
    )
    if changes.name is not None:
        check_worktree_name(updated.name)
    if updated.worktree_mode not in MODES:
        raise WorktreeError(Refusal.INVALID, f"worktree_mode {updated.worktree_mode!r} unknown")
    local = check_subfolder(updated.local_subfolder)
    custom = updated.custom_path or None
    if custom is not None:
        if not Path(custom).is_absolute():
            raise WorktreeError(Refusal.INVALID, f"custom_path {custom!r} must be absolute")
        custom = str(Path(custom).resolve())
    if updated.worktree_mode == "custom" and custom is None:
        raise WorktreeError(Refusal.INVALID, "worktree_mode CUSTOM needs a custom_path")
    return dataclasses.replace(
        updated,
        local_subfolder=local,
        custom_path=custom,
        setup_script=updated.setup_script or None,
    )
