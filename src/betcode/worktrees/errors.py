"""Why a repository or worktree operation was refused: one exception with a kind that the
server maps onto a gRPC status, a message a user can act on, and string details."""

from __future__ import annotations

import enum
from collections.abc import Mapping


class Refusal(enum.Enum):
    INVALID = "invalid"  # a bad name, branch or path (INVALID_ARGUMENT)
    OUTSIDE = "outside"  # a path leaving the allowed tree (PERMISSION_DENIED)
    EXISTS = "exists"  # ALREADY_EXISTS
    NOT_FOUND = "not_found"  # a repository, worktree, branch or rescue (NOT_FOUND)
    NO_SPACE = "no_space"  # RESOURCE_EXHAUSTED, with required/available bytes
    AT_RISK = "at_risk"  # removal would lose work (FAILED_PRECONDITION)
    PRECONDITION = "precondition"  # any other state that forbids it (FAILED_PRECONDITION)
    GIT_FAILED = "git_failed"  # INTERNAL, with git's stderr


class WorktreeError(Exception):
    def __init__(
        self, refusal: Refusal, message: str, details: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.message = message
        self.details = dict(details or {})


class WorkAtRisk(WorktreeError):
    """Removal refused: `at_risk` lists exactly what would be lost."""

    def __init__(self, name: str, at_risk: list[str]) -> None:
        listing = "; ".join(at_risk)
        super().__init__(
            Refusal.AT_RISK,
            f"worktree {name!r} was not removed: it would lose {listing}. Commit and push "
            "(or merge) the work, or remove with --force to save it under a rescue ref first",
            {"at_risk": "\n".join(at_risk)},
        )
        self.at_risk = at_risk
