"""What the bridge asks about a session that is a subagent (implemented by subagents.inbox).

A Protocol here, so permissions never imports the subagents package above it. With no
delegates set (or for an ordinary session) every answer below is "no": the bridge behaves
exactly as without subagents.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from betcode.protocol.messages import CanUseTool, ControlRequest
from betcode.sessions.session import Session


@dataclass(frozen=True, slots=True)
class Delegated:
    """A call the subagent's delegation decided (auto-approve within its limits, or a denial
    by one of them); it has audited it already."""

    allow: bool
    message: str = ""


@dataclass(frozen=True, slots=True)
class Queued:
    """A call the subagent's rate limit holds back (queue_on_rate_limit). `decision` ends
    with its answer once the limit lets it through or it waited too long, with None when the
    user is to answer it after all (auto-approve was revoked meanwhile), or is cancelled when
    the subagent stops first: its claude is gone, and answering would start it again."""

    decision: asyncio.Future[Delegated | None]


class Delegates(Protocol):
    def asker_label(self, session_id: str) -> str | None:
        """ "subagent NAME (step ID)" for a subagent's session, shown with its questions."""

    async def decide(
        self, session: Session, request: ControlRequest, tool: CanUseTool
    ) -> Delegated | Queued | None:
        """For a call no rule decided: the delegation's decision, the call queued for its
        rate limit, or None to forward it."""

    async def child_session(self, parent: Session, session_id: str) -> Session | None:
        """`session_id` if it is a subagent session of `parent` (its questions are answered
        from the parent's clients too), else None."""

    async def child_session_ids(self, parent_session_id: str) -> list[str]:
        """The sessions of the parent's subagents whose questions it may still be shown."""

    async def resumed_later(self, session_id: str) -> bool:
        """Whether `session_id` is the session of a subagent the daemon resumes later (a step
        of an orchestration a restart interrupted) and whose run is not there yet."""

    async def withdrawn(self, session_id: str) -> str | None:
        """Why the questions of `session_id` are withdrawn (a subagent whose run ended or is
        ending: an answer would start its stopped claude again), or None."""
