"""Path completion's pure half: what a typed query may name, and how indexed paths rank.

A query is relative to the directory the call works in (a session's, or the daemon's current
directory: current_directory.py). It may not leave that tree: absolute paths, `~`, and `..`
segments are refused (the symlink check needs the file system: path_index.py).
Matches rank as a user of `@` expects: paths that start with the query, then file names that
start with its last part, then paths that merely contain it; shallower first, then by name.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

MAX_QUERY_CHARS = 4096
DEFAULT_MAX_RESULTS = 50
MAX_RESULTS = 1000


class PathQueryError(ValueError):
    """A query naming something outside the working directory's tree, or not a path at all."""


@dataclass(frozen=True, slots=True)
class IndexedPath:
    path: str  # relative, `/`-separated, no trailing slash
    lowered: str
    name: str  # lowered last segment
    depth: int

    @classmethod
    def of(cls, path: str) -> IndexedPath:
        lowered = path.lower()
        return cls(path, lowered, lowered.rpartition("/")[2], path.count("/"))


def normalize_query(query: str) -> str:
    """The query as a relative path prefix (`./` dropped); raises PathQueryError for one that
    is absolute, starts at a home directory, climbs with `..`, or holds control characters."""
    if len(query) > MAX_QUERY_CHARS:
        raise PathQueryError(f"the query is {len(query)} characters; at most {MAX_QUERY_CHARS}")
    if any(ord(ch) < 32 for ch in query):
        raise PathQueryError("the query holds control characters")
    if query.startswith(("/", "~")):
        raise PathQueryError(
            f"{query!r} is not below the working directory: give a path relative to it"
        )
    parts = query.split("/")
    if ".." in parts:
        raise PathQueryError(
            f"{query!r} climbs out with '..': paths stay below the working directory"
        )
    while parts[:1] == ["."] and len(parts) > 1:
        parts = parts[1:]
    return "/".join(part for index, part in enumerate(parts) if part or index == len(parts) - 1)


def clamp_results(requested: int) -> int:
    """0 means the default; anything above MAX_RESULTS is cut to it."""
    return DEFAULT_MAX_RESULTS if requested <= 0 else min(requested, MAX_RESULTS)


def rank(paths: Sequence[IndexedPath], query: str, limit: int) -> list[str]:
    """The best `limit` paths for a normalized query (see the module docstring)."""
    wanted = query.lower()
    has_folder = "/" in wanted

    def scored() -> list[tuple[int, int, str]]:
        found: list[tuple[int, int, str]] = []
        for entry in paths:
            if entry.lowered.startswith(wanted):
                tier = 0
            elif not has_folder and entry.name.startswith(wanted):
                tier = 1
            elif wanted in entry.lowered:
                tier = 2
            else:
                continue
            found.append((tier, entry.depth, entry.path))
        return found

    return [path for *_, path in heapq.nsmallest(limit, scored())]
