"""Git repositories and worktrees managed by the daemon (issue 13).

`WorktreeManager` creates and removes worktrees (removal never loses work), `RepoRegistry`
keeps the repositories they come from. Both run git as child processes off the event loop.
"""

from betcode.worktrees.errors import Refusal, WorkAtRisk, WorktreeError
from betcode.worktrees.manager import Removal, SessionActivity, WorktreeManager, WorktreeView
from betcode.worktrees.repos import RepoChanges, RepoRegistry

__all__ = [
    "Refusal",
    "Removal",
    "RepoChanges",
    "RepoRegistry",
    "SessionActivity",
    "WorkAtRisk",
    "WorktreeError",
    "WorktreeManager",
    "WorktreeView",
]
