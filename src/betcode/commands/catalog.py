"""The palette's data for one daemon, cached: commands, agents and path completion per directory.

Custom command and agent folders are re-read only when a file in them changed (a stat of each
`.md` file per call; the folders are small). A path index is checked for changes at most every
`freshness_seconds` and rebuilt only when its tree changed (path_index.py). claude's own
commands and agents come from the newest `system/init` line stored for the session, so they are
known for any session that ever ran a turn, also after a daemon restart.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from betcode.commands.current_directory import Place
from betcode.commands.markdown import MarkdownFile, command_name, parse_markdown
from betcode.commands.path_index import PathDetails, PathIndex, build_index, check_inside, details
from betcode.commands.path_index import is_stale as index_is_stale
from betcode.commands.path_query import normalize_query, rank
from betcode.commands.registry import (
    BUILTINS,
    AgentSpec,
    Category,
    CommandSpec,
    Mode,
    Source,
    claude_commands,
    merge,
)
from betcode.protocol.messages import SystemInit
from betcode.protocol.reader import ProtocolReader
from betcode.storage.reader import StoreReader, last_system_init

MAX_CACHED_FOLDERS = 256
MAX_CACHED_INDEXES = 32
MAX_MARKDOWN_BYTES = 256 * 1024  # a command file is a prompt; anything bigger is not read
FRESHNESS_SECONDS = 1.0

# The newest system/init claude sent in a session (None: in any session).
InitLookup = Callable[[str | None], Awaitable[SystemInit | None]]
Stamp = tuple[tuple[str, int, int], ...]


def _stamp(folder: Path, recursive: bool) -> Stamp:
    found: list[tuple[str, int, int]] = []
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if recursive:
                        pending.append(Path(entry.path))
                elif entry.name.endswith(".md") and entry.is_file():
                    info = entry.stat()
                    relative = os.path.relpath(entry.path, folder)
                    found.append((relative, info.st_mtime_ns, info.st_size))
            except OSError:
                continue
    return tuple(sorted(found))


def _read_markdown(path: Path, size: int) -> MarkdownFile | None:
    if size > MAX_MARKDOWN_BYTES:
        return None
    try:
        return parse_markdown(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


@dataclass
class MarkdownFolder:
    """The `.md` files of a folder, parsed again only when the stamp (names, mtimes, sizes)
    changed. Blocking: called in a worker thread."""

    folder: Path
    recursive: bool
    _stamp: Stamp | None = None
    _files: dict[PurePosixPath, MarkdownFile] = field(default_factory=dict)

    def read(self) -> dict[PurePosixPath, MarkdownFile]:
        stamp = _stamp(self.folder, self.recursive)
        if stamp != self._stamp:
            files: dict[PurePosixPath, MarkdownFile] = {}
            for relative, _, size in stamp:
                parsed = _read_markdown(self.folder / relative, size)
                if parsed is not None:
                    files[PurePosixPath(relative)] = parsed
            self._stamp, self._files = stamp, files
        return self._files


def _custom_commands(files: dict[PurePosixPath, MarkdownFile], source: Source) -> list[CommandSpec]:
    return [
        CommandSpec(
            command_name(relative),
            parsed.description(),
            Category.CLAUDE_CODE,
            Mode.PASSTHROUGH,
            source,
            parsed.fields.get("argument-hint") or None,
        )
        for relative, parsed in files.items()
    ]


def _custom_agents(files: dict[PurePosixPath, MarkdownFile], source: Source) -> list[AgentSpec]:
    return [
        AgentSpec(parsed.fields.get("name") or relative.stem, parsed.description(), source)
        for relative, parsed in files.items()
    ]


class _Bounded(OrderedDict[Path, MarkdownFolder]):
    def folder(self, path: Path, recursive: bool) -> MarkdownFolder:
        found = self.get(path)
        if found is None:
            found = self[path] = MarkdownFolder(path, recursive)
            while len(self) > MAX_CACHED_FOLDERS:
                self.popitem(last=False)
        self.move_to_end(path)
        return found


class CommandCatalog:
    """`user_claude_dir`: the user's `~/.claude` as claude sees it (CLAUDE_CONFIG_DIR or
    HOME/.claude of the daemon's environment)."""

    def __init__(
        self,
        user_claude_dir: Path,
        claude_init: InitLookup,
        *,
        freshness_seconds: float = FRESHNESS_SECONDS,
    ) -> None:
        self.user_claude_dir = user_claude_dir
        self._claude_init = claude_init
        self._freshness = freshness_seconds
        self._folders = _Bounded()
        self._indexes: OrderedDict[Path, tuple[PathIndex, float]] = OrderedDict()
        self._index_locks: dict[Path, asyncio.Lock] = {}

    # ---- commands and agents ----

    async def commands(self, place: Place | None) -> list[CommandSpec]:
        """The palette's commands where a call works; `place` None (a daemon without
        sessions): the user's, and claude's as any session last reported them."""
        project_files, user_files = await asyncio.to_thread(
            self._read_both, place, "commands", True
        )
        init = await self._claude_init(place.session_id if place else None)
        return merge(
            BUILTINS,
            _custom_commands(project_files, Source.PROJECT),
            _custom_commands(user_files, Source.USER),
            claude_commands(init.slash_commands if init else ()),
        )

    async def agents(self, place: Place | None) -> list[AgentSpec]:
        """The agents where a call works; `place` None as for commands."""
        project_files, user_files = await asyncio.to_thread(self._read_both, place, "agents", False)
        init = await self._claude_init(place.session_id if place else None)
        return merge(
            _custom_agents(project_files, Source.PROJECT),
            _custom_agents(user_files, Source.USER),
            [AgentSpec(name, "", Source.CLAUDE) for name in (init.agents if init else ())],
        )

    def _read_both(
        self, place: Place | None, kind: str, recursive: bool
    ) -> tuple[dict[PurePosixPath, MarkdownFile], dict[PurePosixPath, MarkdownFile]]:
        user = self._folders.folder(self.user_claude_dir / kind, recursive).read()
        if place is None:
            return {}, user
        project = self._folders.folder(place.directory / ".claude" / kind, recursive).read()
        return project, user

    # ---- paths ----

    async def complete_path(self, root: Path, query: str, limit: int) -> list[PathDetails]:
        """Paths below `root` (a resolved folder in a session's tree) for the query, best first.
        Raises PathQueryError for a query reaching outside `root`."""
        normalized = normalize_query(query)
        index = await self._fresh_index(root)
        return await asyncio.to_thread(self._search, index, normalized, limit)

    @staticmethod
    def _search(index: PathIndex, query: str, limit: int) -> list[PathDetails]:
        check_inside(index.root, query)
        found = (details(index.root, path) for path in rank(index.paths, query, limit))
        return [entry for entry in found if entry is not None]

    async def _fresh_index(self, root: Path) -> PathIndex:
        async with self._index_locks.setdefault(root, asyncio.Lock()):
            cached = self._indexes.get(root)
            if cached is not None:
                index, checked_at = cached
                if time.monotonic() - checked_at < self._freshness:
                    return index
                if not await asyncio.to_thread(index_is_stale, index):
                    self._remember(root, index)
                    return index
            index = await asyncio.to_thread(build_index, root)
            self._remember(root, index)
            return index

    def _remember(self, root: Path, index: PathIndex) -> None:
        self._indexes[root] = (index, time.monotonic())
        self._indexes.move_to_end(root)
        while len(self._indexes) > MAX_CACHED_INDEXES:
            evicted, _ = self._indexes.popitem(last=False)
            self._index_locks.pop(evicted, None)

    def forget(self, root: Path) -> None:
        """Drops the path index of `root` (the `reload-remote` service command); command and
        agent folders are checked on every call anyway."""
        self._indexes.pop(root, None)


def user_claude_dir(environ: Mapping[str, str]) -> Path:
    """Where claude keeps the user's commands and agents: CLAUDE_CONFIG_DIR, else ~/.claude."""
    configured = environ.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(environ.get("HOME") or Path.home()) / ".claude"


def stored_init_lookup(reader: StoreReader) -> InitLookup:
    """claude's newest system/init for a session (or any), as the session recorded it."""
    protocol = ProtocolReader()

    async def lookup(session_id: str | None) -> SystemInit | None:
        line = await reader.read(lambda conn: last_system_init(conn, session_id))
        message = protocol.decode(line) if line is not None else None
        return message if isinstance(message, SystemInit) else None

    return lookup
